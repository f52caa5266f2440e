"""Studies: everything that runs models (or samples data) to answer one question, in one shape.

Each study kind is a config dataclass and a registered :class:`Study` whose
``run(config, store) -> StudyResult`` writes one long-form table through
``Store.write_study`` (read back by its report section with ``Store.read_studies``):

==============  ==============================  ========================  ==================
kind            config                          one-call form             report section
==============  ==============================  ========================  ==================
resolution      :class:`ResolutionConfig`       :func:`resolution_sweep`  ``resolution``
compositing     :class:`CompositingConfig`      :func:`compositing_study` ``compositing``
trajectory      :class:`TrajectoryConfig`       :class:`Trajectory`       ``fine-tuning``
attributes      :class:`AttributeConfig`        :func:`attribute_splits`  ``attributes``
replication     :class:`ReplicationConfig`      :func:`replicate`         ``replication``
transfer        :class:`TransferConfig`         ``shiftbench.transfer``   ``transfer``
==============  ==============================  ========================  ==================

Studies call the engine like any user (:func:`shiftbench.evaluate`); nothing below this package
(engine, settings, shifts, datasets) imports it.
"""
from shiftbench.studies.attributes import AttributeConfig, AttributeStudy, attribute_splits
from shiftbench.studies.base import (
    Study,
    StudyResult,
    as_store,
    get_study,
    list_studies,
    register_study,
    run_study,
    study_name,
)
from shiftbench.studies.compositing import CompositingConfig, CompositingStudy, compositing_study
from shiftbench.studies.replication import ReplicationConfig, ReplicationStudy, replicate
from shiftbench.studies.resolution import ResolutionConfig, ResolutionStudy, resolution_sweep
from shiftbench.studies.trajectory import Checkpoint, Trajectory, TrajectoryConfig, TrajectoryStudy
from shiftbench.studies.transfer import TransferConfig, TransferStudy, TransferTask

__all__ = [
    "Study", "StudyResult", "as_store", "get_study", "list_studies", "register_study", "run_study", "study_name",
    "ResolutionConfig", "ResolutionStudy", "resolution_sweep",
    "CompositingConfig", "CompositingStudy", "compositing_study",
    "Checkpoint", "Trajectory", "TrajectoryConfig", "TrajectoryStudy",
    "AttributeConfig", "AttributeStudy", "attribute_splits",
    "ReplicationConfig", "ReplicationStudy", "replicate",
    "TransferConfig", "TransferStudy", "TransferTask",
]
