"""Datasets in the layouts people actually download, and the class maps between their label spaces.

Named datasets (``load_dataset(name, data_root)``; ``shiftbench list datasets``):
ImageNet val, ImageNetV2 (three variants), ImageNet-A/-R/-Sketch, ObjectNet 1.0,
ImageNet-Vid-Robust and YTBB-Robust (with pm-sets), CIFAR-10/10.1/10.2 and ImageNet-C on
disk; plus any image folder, a CSV/Parquet manifest, arrays in memory and a local Hugging Face
dataset. Every builder returns an :class:`ImageDataset` (ids, targets, label space, lazy
``load``); a missing or wrong layout is a :class:`LayoutError` naming the expected layout and
the first missing path; a bad image fails in ``load`` with :class:`ImageDecodeError`.
"""
from shiftbench.datasets import classmaps
from shiftbench.datasets._scan import IMG_EXTENSIONS, LayoutError
from shiftbench.datasets.arrays import CIFAR10_CLASSES, cifar10, cifar10_1, cifar10_2, from_arrays  # noqa: E402
from shiftbench.datasets.base import (
    MAX_PIXELS,
    ArrayDataset,
    FileDataset,
    ImageDataset,
    ImageDecodeError,
    decode_image,
    open_image,
    to_rgb,
)
from shiftbench.datasets.folders import (  # noqa: E402 - registers its datasets
    IMAGENET_C_CORRUPTIONS,
    IMAGENETV2_VARIANTS,
    image_folder,
    imagenet_c_on_disk,
    imagenet_val,
    imagenetv2,
    objectnet,
    wnid_folder,
)
from shiftbench.datasets.hf import HFDataset, hf_dataset  # noqa: E402
from shiftbench.datasets.manifest import manifest  # noqa: E402
from shiftbench.datasets.registry import (
    DATASETS,
    DatasetEntry,
    dataset_root,
    get_dataset_entry,
    list_datasets,
    load_dataset,
    register_dataset,
)
from shiftbench.datasets.video import PmSet, VideoDataset, pm_k_accuracy, pm_sets, video_robust  # noqa: E402

__all__ = [
    "ArrayDataset", "CIFAR10_CLASSES", "DATASETS", "DatasetEntry", "FileDataset", "HFDataset", "IMAGENETV2_VARIANTS",
    "IMAGENET_C_CORRUPTIONS", "IMG_EXTENSIONS", "ImageDataset", "ImageDecodeError", "LayoutError", "MAX_PIXELS",
    "PmSet", "VideoDataset", "cifar10", "cifar10_1", "cifar10_2", "classmaps", "dataset_root", "decode_image",
    "from_arrays", "get_dataset_entry", "hf_dataset", "image_folder", "imagenet_c_on_disk", "imagenet_val",
    "imagenetv2", "list_datasets", "load_dataset", "manifest", "objectnet", "open_image", "pm_k_accuracy", "pm_sets",
    "register_dataset", "to_rgb", "video_robust", "wnid_folder",
]
