"""What a user asks for: a machine, a node count, a framework and how to place ranks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Framework = Literal["pytorch", "tensorflow", "mxnet"]
Mode = Literal["auto", "per-gpu", "per-nic", "per-socket", "per-node", "per-core"]
Precision = Literal["fp32", "bf16", "fp16"]
Distributed = Literal["auto", "gloo", "nccl", "mpi", "horovod"]
SpatialSplit = Literal["rows", "rows_and_columns"]


class JobRequest(BaseModel):
    """A job request. Everything left unset is decided by the planner from the site profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(default=1, ge=1)
    framework: Framework = "pytorch"
    node_kind: str | None = None
    ranks_per_node: int | None = Field(default=None, ge=1)
    threads_per_rank: int | None = Field(default=None, ge=1)
    mode: Mode = "auto"
    precision: Precision = "fp32"
    distributed: Distributed = "auto"
    use_gpus: bool | None = Field(default=None, description="None: use GPUs when the node has them")
    spatial_ways: int = Field(default=1, ge=1, description="ranks that share each sample (spatial parallelism)")
    spatial_split: SpatialSplit = Field(default="rows", description="the image axes a sample is cut along")
    image: str | None = Field(default=None, description="the container image the job runs (--image); None: the site's")
    net_plugin: str | None = Field(
        default=None, min_length=1, pattern=r"^[^\n\r\x00]+$",
        description="the NCCL/RCCL network plugin the image carries (NCCL_NET_PLUGIN), for an image hpcdl does not know",
    )
