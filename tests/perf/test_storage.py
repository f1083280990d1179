"""Checkpoint and data-loading time (perf/storage.py).

Checkpoint size: BLOOM 176B's model card gives 329 GB of bf16 weights and 2.3 TB with the
optimizer states (its "GB" and "TB" are binary: 176.2 B parameters x 2 bytes = 328 GiB),
i.e. 2 + 12 bytes a parameter. Token ids: Megatron's indexed dataset stores them as uint16
below a 65,500-id vocabulary, else int32.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model, system_for_gpu
from gpuscale.errors import InputError
from gpuscale.perf.comm import Fabric
from gpuscale.perf.plan import Plans, Workload
from gpuscale.perf.storage import (
    ASYNC_SAVE_FIXED_S,
    StoragePolicy,
    checkpoint_bytes,
    host_link_Bps,
    parse_interval,
    storage_cost,
)
from gpuscale.perf.training import estimate
from gpuscale.perf.transformer import param_count
from gpuscale.units import GiB, fmt_count, fmt_time, parse_quantity

TiB = 2.0**40


def workload(model: str, gpu: str = "h100-sxm", gpus: int = 64, gbs: int = 512) -> Workload:
    g = get_gpu(gpu)
    s = system_for_gpu(g)
    return Workload(get_model(model), g, s, Fabric.from_system(s, gpus), gpus, 2048, gbs, "bf16")


def test_bloom_checkpoint_matches_its_model_card() -> None:
    w = workload("bloom-176b")
    n = param_count(w.model)
    assert n * 2 / GiB == pytest.approx(329, rel=0.01)  # "Bf16 weights: 329GB"
    assert checkpoint_bytes(w) / TiB == pytest.approx(2.3, rel=0.03)  # "2.3TB" with optimizer
    assert checkpoint_bytes(w) == n * 14


GPT3_PARAMS = 174_591_270_912  # GPT-3 175B, as tests/perf/test_transformer.py checks
GPT3_CKPT = GPT3_PARAMS * 14  # 2,444,277,792,768 bytes


def test_synchronous_checkpoint_stalls_for_the_whole_write() -> None:
    w = workload("gpt3-175b")
    pol = StoragePolicy(checkpoint_every_s=1800.0, write_Bps=100e9)
    c = storage_cost(w, 10.0, 64, pol)
    assert c.checkpoint_bytes == GPT3_CKPT
    assert c.checkpoint_write_s == pytest.approx(24.4427779)  # 2.444 TB at 100 GB/s
    assert c.checkpoint_stall_s == c.checkpoint_write_s
    assert c.checkpoint_every_steps == 180  # the step that reaches 1800 s of 10 s steps
    assert c.checkpoint_interval_s == 1800.0
    assert c.checkpoint_per_step_s == pytest.approx(24.4427779 / 180)
    assert c.checkpoints_in(1000) == 6  # at 180, 360, ..., 900 and at the end
    assert c.checkpoints_in(900) == 5  # the last one is the end
    # 1805 s is reached by the 181st step, not the 180th
    later = storage_cost(w, 10.0, 64, replace(pol, checkpoint_every_s=1805.0))
    assert later.checkpoint_every_steps == 181
    # storage faster than the GPUs' host links together: 8 x 63 GB/s bound the write
    fast = storage_cost(w, 10.0, 8, StoragePolicy(checkpoint_every_steps=10, write_Bps=1e15))
    assert fast.checkpoint_write_s == pytest.approx(GPT3_CKPT / 504e9)


def test_an_interval_shorter_than_a_step_saves_every_step() -> None:
    c = storage_cost(
        workload("gpt3-175b"), 10.0, 64, StoragePolicy(checkpoint_every_s=1.0, write_Bps=1e11)
    )
    assert c.checkpoint_every_steps == 1 and c.interval_below_step


def test_asynchronous_checkpoint_stalls_for_its_set_up_and_the_copy_to_host() -> None:
    w = workload("gpt3-175b")  # H100 SXM in a DGX H100: PCIe Gen 5 x16, 63 GB/s a direction
    assert host_link_Bps(w) == 63e9
    pol = StoragePolicy(checkpoint_every_steps=100, write_Bps=100e9, asynchronous=True)
    c = storage_cost(w, 10.0, 64, pol)
    # 6 s of set-up (PyTorch DCP's async_save: 6.3 s a save for a 7B model) + 0.606 s copy
    assert c.checkpoint_stall_s == pytest.approx(6.0 + GPT3_CKPT / (64 * 63e9))
    assert c.checkpoint_wait_s == 0.0
    # a background write (244.4 s at 10 GB/s) longer than the interval (one 10 s step)
    # holds up the next save by what it overruns
    slow = StoragePolicy(checkpoint_every_steps=1, write_Bps=10e9, asynchronous=True)
    c = storage_cost(w, 10.0, 64, slow)
    assert c.checkpoint_wait_s == pytest.approx(244.427779 - 10.0)
    assert c.checkpoint_stall_s == pytest.approx(6.0 + GPT3_CKPT / (64 * 63e9) + 234.427779)
    # the background write drains from host memory: the GPUs' links do not bound it
    fast = storage_cost(w, 10.0, 8, replace(pol, write_Bps=1e15))
    assert fast.checkpoint_write_s == pytest.approx(GPT3_CKPT / 1e15)
    # what a synchronous save would stall, beside it: the write at the storage's 100 GB/s
    # (2.44 s, under the asynchronous 6.6 s), or the 8 GPUs' host links' 504 GB/s
    assert storage_cost(w, 10.0, 64, pol).checkpoint_sync_s == pytest.approx(GPT3_CKPT / 100e9)
    assert fast.checkpoint_sync_s == pytest.approx(GPT3_CKPT / (8 * 63e9))


@pytest.mark.parametrize(
    ("gpu", "gbps"),
    [
        ("gb200", 225.0),  # NVLink-C2C, two GPUs per Grace
        ("gh200", 450.0),  # NVLink-C2C, one GPU
        ("b200", 63.0),  # a Gen 6 GPU in a Gen 5 HGX B200
        ("a100-sxm-80gb", 31.5),
    ],
)
def test_host_link_by_gpu_and_server(gpu: str, gbps: float) -> None:
    assert host_link_Bps(workload("llama3-70b", gpu=gpu)) == gbps * 1e9


@pytest.mark.parametrize(
    ("model", "id_bytes"), [("gpt3-175b", 2.0), ("llama3-70b", 4.0), ("bloom-176b", 4.0)]
)
def test_data_loading_reads_token_ids(model: str, id_bytes: float) -> None:
    w = workload(model)
    c = storage_cost(w, 1.0, 64, StoragePolicy(read_Bps=1e6))
    assert c.data_bytes_per_step == 512 * 2049 * id_bytes
    assert c.data_read_s == pytest.approx(512 * 2049 * id_bytes / 1e6)
    assert c.data_exposed_s == pytest.approx(c.data_read_s - 1.0)  # slower than the step
    fast = storage_cost(w, 1.0, 64, StoragePolicy(read_Bps=1e12))
    assert fast.data_exposed_s == 0.0  # read ahead, behind the step


@settings(max_examples=40, deadline=None)
@given(
    step=st.floats(0.1, 100.0),
    every=st.floats(1.0, 1e5),
    write=st.floats(1e8, 1e13),
)
def test_async_never_stalls_more_than_sync(step: float, every: float, write: float) -> None:
    w = workload("llama3-70b")
    sync = storage_cost(w, step, 64, StoragePolicy(checkpoint_every_s=every, write_Bps=write))
    asyn = storage_cost(
        w, step, 64, StoragePolicy(checkpoint_every_s=every, write_Bps=write, asynchronous=True)
    )
    # the copy to host runs at 63 GB/s per GPU, far above any per-GPU share of the write:
    # an asynchronous save holds training no longer than a synchronous one but for its set-up
    assert asyn.checkpoint_stall_s <= sync.checkpoint_stall_s + ASYNC_SAVE_FIXED_S + 1e-9
    assert sync.checkpoint_every_steps == max(math.ceil(every / step - 1e-9), 1)


def test_time_to_train_adds_every_checkpoint() -> None:
    w = workload("llama3-70b", gpus=1024, gbs=1024)
    e = estimate(w, Plans.of(tp=8, pp=4, dp=32, sharding=1), default_calibration())
    pol = StoragePolicy(checkpoint_every_steps=100, write_Bps=50e9)
    plain = e.summary(0, 1e11)
    s = e.summary(0, 1e11, pol)
    steps = s["train_steps"]
    assert s["checkpoints"] == -(-steps // 100)
    stall = param_count(w.model) * 14.0 / 50e9
    assert s["time_to_train_s"] == pytest.approx(
        plain["time_to_train_s"] + -(-steps // 100) * stall
    )
    assert s["storage"]["checkpoint_every_steps"] == 100
    assert np.isclose(s["step_time_s"], plain["step_time_s"])  # the step itself is unchanged


def test_a_run_that_saves_every_few_steps_or_restarts_slowly_says_what_it_asks() -> None:
    from gpuscale.ops.reliability import FailurePolicy

    w = workload("llama3-70b", gpus=1024, gbs=1024)
    e = estimate(w, Plans.of(tp=8, pp=4, dp=32, sharding=1), default_calibration())
    step = float(e.step_s[0])
    # every step, asynchronously at 1 TB/s: 987.75 GB a save, 86,400 / (step + stall) a day
    pol = StoragePolicy(checkpoint_every_steps=1, write_Bps=1e12, asynchronous=True)
    cost = e.storage(0, pol)
    s = e.summary(0, None, pol)
    per_day = cost.checkpoint_bytes * 86400 / (step + cost.checkpoint_stall_s)
    assert any(
        n.startswith("saving every") and f"{per_day / 1e15:.2f} PB a day" in n for n in s["notes"]
    )
    # the background write takes most of each interval (a step and the save's stall)
    slow = StoragePolicy(
        checkpoint_every_steps=1,
        write_Bps=987.75e9 / (0.9 * (step + cost.checkpoint_stall_s)),
        asynchronous=True,
    )
    assert any("keep the storage busy" in n for n in e.summary(0, None, slow)["notes"])
    # a 1-day restart against a job MTBF of 2112 d / 1024 GPUs = 2.06 days: fine; 3 days not
    ok = e.summary(0, None, pol, FailurePolicy(2112 * 86400.0, 86400.0))
    assert not any(n.startswith("a restart") for n in ok.get("notes", []))
    bad = e.summary(0, None, pol, FailurePolicy(2112 * 86400.0, 3 * 86400.0))
    assert any(n.startswith("a restart (3.0 days) takes longer") for n in bad["notes"])


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("30min", (1800.0, None)),
        ("2h", (7200.0, None)),
        ("900s", (900.0, None)),
        ("500steps", (None, 500)),
        ("1 step", (None, 1)),
    ],
)
def test_interval_is_a_time_or_a_step_count(
    text: str, want: tuple[float | None, int | None]
) -> None:
    assert parse_interval(text) == want


@pytest.mark.parametrize(
    "text", ["30", "0steps", "-5min", "1.5steps", "soon", "0s", "1e300h", "9" * 20 + "steps"]
)
def test_interval_without_a_unit_or_positive_value_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="checkpoint-every"):
        parse_interval(text)


def test_policy_needs_both_an_interval_and_a_write_rate() -> None:
    with pytest.raises(InputError, match="storage-write-bw"):
        StoragePolicy(checkpoint_every_steps=10).check()
    with pytest.raises(InputError, match="checkpoint-every"):
        StoragePolicy(write_Bps=1e9).check()
    with pytest.raises(InputError, match="checkpoint-every"):
        StoragePolicy(checkpoint_every_steps=0, write_Bps=1e9).check()
    with pytest.raises(InputError, match="checkpoint-every"):
        StoragePolicy(checkpoint_every_s=float("inf"), write_Bps=1e9).check()
    with pytest.raises(InputError, match="storage-read-bw"):
        StoragePolicy(read_Bps=float("nan")).check()


def test_a_link_rate_in_gigabits_per_second_is_read_in_bits() -> None:
    # Gb/s is gigabits (lower-case b), GB/s gigabytes: 100 Gb/s is 12.5 GB/s
    assert parse_quantity("100Gb/s", "bytes/s", "r") == 12.5e9
    assert parse_quantity("100Gbps", "bytes/s", "r") == 12.5e9
    assert parse_quantity("100GB/s", "bytes/s", "r") == 100e9


def test_token_counts_print_as_runs_are_told() -> None:
    assert [fmt_count(x) for x in (1.56e13, 15e12, 3e11, 2.5e9, 999, 999.6e9, 2e15)] == [
        "15.6T",
        "15T",
        "300B",
        "2.5B",
        "999",
        "1T",  # rounded, then prefixed
        "2P",
    ]


def test_minutes_and_hours_parse_and_print() -> None:
    assert parse_quantity("30min", "seconds", "t") == 1800.0
    assert parse_quantity("1.5h", "seconds", "t") == 5400.0
    assert fmt_time(1800.0) == "30.0 min"
    assert fmt_time(599.0) == "599.000 s"
