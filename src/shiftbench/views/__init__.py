"""Views over one forward pass: top-1/top-5, class subsets, many-to-one maps, superclasses,
pm-k and calibration, all pure numpy functions of stored logits and labels.

>>> import numpy as np
>>> from shiftbench.views import SubsetView, calibration, top1
>>> cols = SubsetView("toy", [1, 2]).apply(np.array([[5.0, 1.0, 2.0], [0.0, 3.0, 1.0]]), [2, 2])
>>> top1(cols)
50.0
"""
from shiftbench.views._ops import CONVENTIONS, check_convention
from shiftbench.views.base import COLUMNS, Target, View
from shiftbench.views.classmap import ClassMapSpec, ClassMapView, read_class_map, resolve_class_map
from shiftbench.views.full import FullView
from shiftbench.views.imagenet import (
    imagenet_a_view,
    imagenet_r_view,
    objectnet_imagenet_ids,
    objectnet_view,
    video_view,
)
from shiftbench.views.mapped import MappedView
from shiftbench.views.metrics import calibration, top1, top5
from shiftbench.views.multilabel import MeanAveragePrecision, mean_average_precision
from shiftbench.views.pmk import pm_k, pm_k_anchors
from shiftbench.views.subset import SubsetView
from shiftbench.views.superclass import SuperclassView

__all__ = [
    "View", "Target", "COLUMNS", "CONVENTIONS", "check_convention",
    "FullView", "SubsetView", "MappedView", "SuperclassView", "ClassMapView", "ClassMapSpec",
    "read_class_map", "resolve_class_map",
    "pm_k", "pm_k_anchors", "calibration", "top1", "top5", "mean_average_precision", "MeanAveragePrecision",
    "imagenet_a_view", "imagenet_r_view", "objectnet_view", "objectnet_imagenet_ids", "video_view",
]
