"""Readers for what schedulers hold: engine command lines, Kubernetes objects, node labels, and
the admission and scheduler-extender wire shapes.

Plain Python (frozen dataclasses, no HTTP types), so pre-flight checks, the admission webhook
and the scheduler extender share one reading of a workload. Every value read says where it came
from; input that cannot be read gives a `ReadProblem` (returned by the object readers, carried
by `WorkloadError` from the command reader), never another exception.
"""

from service.workloads.admission import (
    AdmissionRequest,
    AdmissionResponse,
    admission_review,
    read_admission_response,
    read_admission_review,
)
from service.workloads.commands import (
    EngineCommand,
    IgnoredArg,
    find_engine_command,
    format_engine_args,
    parse_command,
    parse_engine_args,
)
from service.workloads.engine_flags import ENGINE_FLAGS, Engine, EngineFlags, FlagSpec, OptionValue
from service.workloads.extender import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    filter_result_json,
    host_priority_list_json,
    read_extender_args,
)
from service.workloads.gpus import GpuRequest, ProductSelector
from service.workloads.kubernetes import (
    OtherContainer,
    ServingWorkload,
    WorkloadReading,
    read_workloads,
)
from service.workloads.models import ModelRef
from service.workloads.nodes import MigDevices, NodeGpus, Sharing, read_node
from service.workloads.sources import ReadProblem, Sourced, WorkloadError

__all__ = [
    "ENGINE_FLAGS",
    "AdmissionRequest",
    "AdmissionResponse",
    "Engine",
    "EngineCommand",
    "EngineFlags",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "FlagSpec",
    "GpuRequest",
    "HostPriority",
    "IgnoredArg",
    "MigDevices",
    "ModelRef",
    "NodeGpus",
    "OptionValue",
    "OtherContainer",
    "ProductSelector",
    "ReadProblem",
    "ServingWorkload",
    "Sharing",
    "Sourced",
    "WorkloadError",
    "WorkloadReading",
    "admission_review",
    "filter_result_json",
    "find_engine_command",
    "format_engine_args",
    "host_priority_list_json",
    "parse_command",
    "parse_engine_args",
    "read_admission_response",
    "read_admission_review",
    "read_extender_args",
    "read_node",
    "read_workloads",
]
