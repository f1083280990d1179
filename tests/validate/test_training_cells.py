"""How published rows' cells are read: the spellings of other tables, rows that contradict
themselves, and figures in the wrong unit. Each case is a row of another file that must
be read as its source meant, or skipped with the reason, never misread."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from test_training_rows import COLUMNS, _row

from gpuscale.calibrate import default_calibration
from gpuscale.catalog import get_gpu, get_model
from gpuscale.errors import InputError
from gpuscale.perf.plan import RECOMPUTE, SHARDING
from gpuscale.perf.transformer import model_flops_per_token, param_count
from gpuscale.validate.report import SkipRow
from gpuscale.validate.training import UnsupportedRowError, choose_plan, prepare, validate_training
from gpuscale.validate.training_cells import read_recompute, read_sharding, read_target
from gpuscale.validate.training_model import model_for


def _write(tmp_path: Path, rows: list[dict[str, str]], header: list[str] | None = None) -> Path:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header or COLUMNS)
        for r in rows:
            w.writerow([r.get(c, "") for c in COLUMNS])
    return path


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("8xH100", "h100-sxm"),  # a count written against the part
        ("8×MI300X", "mi300x"),
        ("A100 (PCIe)", "a100-pcie-80gb"),  # no size: the 80 GB part, as a bare "A100" is
        ("NVIDIA A100 PCIe", "a100-pcie-80gb"),
        ("A100 PCIe 40GB", "a100-pcie-40gb"),
        ("8*H100", "h100-sxm"),
        ("NVIDIA HGX H100 8-GPU", "h100-sxm"),
        ("H100 x 64 GPUs", "h100-sxm"),  # a count beyond 16 with its unit
        ("H100 x 64", "h100-sxm"),  # or without, where no H100 has 64 GB
        ("A100 x 128", "a100-sxm-80gb"),
        ("DGX-2 (V100 32GB)", "v100-sxm2-32gb"),  # a system named with its digits
        ("DGX-1 (V100)", "v100-sxm2-16gb"),  # the part that system holds
        ("DGX-1 (V100 32GB)", "v100-sxm2-32gb"),  # unless a size says otherwise
        ("H100s", "h100-sxm"),  # a plural
        ("A100s (80GB)", "a100-sxm-80gb"),
        ("L40S", "l40s"),  # a part whose name ends in S, no plural
        ("8x V100s", "v100-sxm2-32gb"),  # the catalog has no V100S: V100s are V100s
    ],
)
def test_gpu_spellings_of_other_tables(name: str, key: str) -> None:
    assert get_gpu(name).key == key


@pytest.mark.parametrize(
    ("cell", "key"),
    [
        ("NVIDIA Ampere (SKU not stated)", "a100-sxm-80gb"),
        ("NVIDIA Hopper GPUs", "h100-sxm"),
        ("Blackwell", "b200"),
    ],
)
def test_an_architecture_without_its_part_is_its_training_part_and_says_so(
    cell: str, key: str
) -> None:
    pr = prepare(_row(gpu=cell, measured_tokens_per_s_per_gpu="300"), "test")
    assert pr.workload.gpu.key == key
    assert pr.notes[0] == f"GPU {cell!r} names an architecture, not a part: {key} assumed"


@pytest.mark.parametrize("cell", ["RTX 3090 (Ampere)", "RTX A4000 (Ampere)", "Blackwell B100"])
def test_a_part_the_catalog_lacks_is_not_its_architectures_training_part(cell: str) -> None:
    with pytest.raises(SkipRow, match="not in the catalog"):
        prepare(_row(gpu=cell, measured_tokens_per_s_per_gpu="300"), "test")


@pytest.mark.parametrize(
    ("cells", "reason"),
    [
        ({"gpu": "H1000"}, "gpu 'H1000' not in the catalog (did you mean h100-"),
        ({"precision": "fp7"}, "precision 'fp7' not modelled (bf16, fp16, fp8"),
        ({"recompute": "sometimes"}, "recompute 'sometimes' not modelled (none, selective"),
        ({"dist_optimizer_or_zero": "zero9"}, "sharding 'zero9' not modelled (DDP, distrib"),
    ],
)
def test_a_skipped_cell_says_what_is_read(cells: dict[str, str], reason: str) -> None:
    with pytest.raises(SkipRow) as exc:
        prepare(_row(**cells, measured_tokens_per_s_per_gpu="300"), "test")
    assert reason in str(exc.value)


def test_a_row_whose_degrees_use_fewer_gpus_than_it_states_is_skipped() -> None:
    # TP8 x PP4 x DP2 = 64 GPUs on a row of 128: its per-GPU figure counts other GPUs
    pr = prepare(_row(num_gpus="128", tp="8", pp="4", dp="2"), "test")
    with pytest.raises(SkipRow, match=r"= 64 GPUs, fewer than num_gpus \(128\)"):
        choose_plan(pr, default_calibration())


def test_a_dense_catalog_model_takes_the_rows_ffn_width() -> None:
    # Llama 3 70B with a 14,336-wide MLP (the row's) instead of its 28,672
    base, _ = model_for({"model": "llama3-70b"}, "r")
    model, notes = model_for({"model": "llama3-70b", "ffn_hidden": "14336"}, "r")
    assert model.ffn_hidden == model.dense_ffn_hidden == 14336
    # 80 layers x 3 matrices x 8192 x (28672 - 14336) fewer MLP weights
    assert param_count(base) - param_count(model) == 80 * 3 * 8192 * (28672 - 14336)
    assert notes == ["llama3-70b with the row's ffn_hidden=14336 (catalog's otherwise)"]


def test_a_catalog_model_and_a_stated_size_that_disagree_skip_the_row() -> None:
    with pytest.raises(SkipRow, match=r"params_b=70 but 'llama3-8b' \(llama3-8b\) has 8\.0 B"):
        model_for({"model": "llama3-8b", "params_b": "70"}, "r")
    model, _ = model_for({"model": "llama3-70b", "params_b": "70"}, "r")  # within 25 %
    assert model.key == "llama3-70b"


@pytest.mark.parametrize(("col", "value"), [("heads", "64.5"), ("layers", "80.5"), ("vocab", "0")])
def test_a_shape_cell_that_is_no_whole_number_skips_the_row(col: str, value: str) -> None:
    with pytest.raises(SkipRow, match=f"{col}={value!r}: a model's shape is whole numbers"):
        model_for({"model": "llama3-70b", col: value}, "r")


def test_a_measurement_far_below_any_runs_rate_is_in_another_unit() -> None:
    # 10,200 s a step (milliseconds in a seconds column): 128 x 8192 / 10200 / 64 = 1.6
    # tokens/s per GPU, 0.7 TFLOP/s of the H100's 989
    row = _row(measured_tokens_per_s_per_gpu="", measured_step_time_s="10200")
    with pytest.raises(SkipRow, match="under 1 % of h100-sxm's bf16 dense peak: check"):
        prepare(row, "test")


def test_reported_tflops_beyond_any_recompute_leave_the_recompute_to_the_search() -> None:
    # 1,000 tokens/s of Llama 3 70B at 8K is ~0.48 PFLOP/s of model FLOPs: 2,000 TFLOP/s
    # reported would be 4x, more than recomputation adds (4/3)
    pr = prepare(_row(measured_tflops_per_gpu="2000"), "test")
    assert "recompute" not in pr.fixed
    assert any("more than any recomputation adds" in n for n in pr.notes)
    pr = prepare(_row(measured_tflops_per_gpu="630"), "test")  # 1.31x: full recompute
    assert pr.fixed["recompute"] == RECOMPUTE.index("full")


def test_sequence_parallelism_off_keeps_the_recipes_tp_overlap_off() -> None:
    # TP overlap needs SP; a recipe row that turns SP off runs TP without it
    pr = prepare(_row(source="NeMo performance summary", tp="4", seq_parallel="0"), "test")
    assert pr.fixed["sp"] is False and "tp_overlap" not in pr.fixed


@pytest.mark.parametrize(
    ("cell", "mode"),
    [
        ("SAC", "selective"),
        ("AC", "full"),
        ("no AC", "none"),
        ("Y", "full"),
        ("N", "none"),
        ("full (4 layers)", "partial"),  # Megatron's block method over 4 layers a stage
        ("full (all 80 layers)", "full"),
        ("full (uniform, 1 layer)", "full"),  # the uniform method recomputes every layer
        ("full (1 layer)", "full"),  # NeMo's default: uniform, groups of one layer
        ("full, 1 layer", "full"),
        ("full (12 layers)", "partial"),
        ("block", "partial"),
        ("AC: off", "none"),
        ("AC = False", "none"),
        ("N/A (no AC)", "none"),
        ("SAC: off", "none"),
        # a checkpoint per transformer block is every layer's, not Megatron's block method
        ("full AC (per transformer block)", "full"),
        ("recompute each block", "full"),
        ("recompute_method=block", "partial"),
        ("--recompute-activations", "selective"),  # Megatron's flag for selective
        ("attention-only recompute", "selective"),
        ("activation recomputation", "full"),
        ("every layer", "full"),
        ("not used", "none"),
        ("\u2713", "full"),
        ("\u274c", "none"),
        ("full AC (per-block)", "full"),
        ("full (each decoder block)", "full"),
        ("full AC (per transformer-block)", "full"),
        ("recompute activations: off", "none"),  # the flag switched off
        ("--recompute-activations=False", "none"),
        ("recompute activations: full", "full"),  # the mode named wins over the flag
        ("offload-free full", "full"),
    ],
)
def test_recompute_spellings(cell: str, mode: str) -> None:
    assert read_recompute(cell) == mode


@pytest.mark.parametrize("cell", ["none, CPU offload of activations", "activation offloading"])
def test_activation_offloading_skips_the_row(cell: str) -> None:
    with pytest.raises(SkipRow, match="offloading to host memory is not modelled"):
        read_recompute(cell)
    assert read_recompute("full (no offload)") == "full"


@pytest.mark.parametrize(
    ("cell", "mode"),
    [
        ("Y", "dist-opt"),
        ("disabled", "none"),
        ("\u2713", "dist-opt"),  # a distributed-optimizer column ticked
        ("\u2717", "none"),
        ("optimizer state sharding", "zero1"),
        ("sharded optimizer", "zero1"),
        ("sharded optimizer + gradients", "zero2"),  # the gradients too
        ("optimizer, gradient and parameter sharding", "zero3"),
        ("optimizer sharding: off", "none"),  # switched off, before or after the name
        ("no optimizer sharding", "none"),
    ],
)
def test_sharding_yes_no_spellings(cell: str, mode: str) -> None:
    assert read_sharding(cell) == SHARDING.index(mode)


def test_target_and_convention_are_read_in_any_case(tmp_path: Path) -> None:
    row = _row(
        target="TFLOPS_per_GPU",
        flop_convention="Megatron_Model_Causal",
        measured_tflops_per_gpu="400",
        measured_tokens_per_s_per_gpu="",
    )
    report = validate_training(_write(tmp_path, [row]), default_calibration())
    assert report.rows[0].status == "scored" and report.rows[0].measured == 400.0


@pytest.mark.parametrize(
    ("cells", "per_tflops"),
    [
        ({"measured_tflops_per_gpu": "150"}, 1.0),
        # MFU: of the H100's dense BF16 peak
        ({"measured_mfu": "0.45"}, 1.0 / (get_gpu("h100-sxm").peak_flops("bf16") / 1e12)),
    ],
)
def test_an_excluded_row_is_reported_in_the_figure_it_gives(
    tmp_path: Path, cells: dict[str, str], per_tflops: float
) -> None:
    cal = default_calibration()
    row = _row(target="excluded", measured_tokens_per_s_per_gpu="", **cells)
    r = validate_training(_write(tmp_path, [row]), cal).rows[0]
    assert r.status == "reported"
    assert r.measured == float(next(iter(cells.values())))
    # the same run predicted in tokens/s, times gpuscale's model FLOPs a token (no
    # convention named: causal attention counted as half)
    tokens = validate_training(_write(tmp_path, [_row()]), cal).rows[0].predicted
    assert tokens is not None
    flops = model_flops_per_token(get_model("llama3-70b"), 8192, causal=True)
    assert r.predicted == pytest.approx(tokens * flops / 1e12 * per_tflops, rel=1e-9)


def test_a_skipped_row_shows_the_figure_its_target_compares(tmp_path: Path) -> None:
    row = _row(
        gpu="TPU v5p",
        target="mfu",
        measured_mfu="0.45",
        measured_tokens_per_s_per_gpu="1602",
    )
    report = validate_training(_write(tmp_path, [row]), default_calibration())
    assert report.rows[0].status == "skipped" and report.rows[0].measured == 0.45


def test_a_column_named_twice_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(",".join([*COLUMNS, "gpu"]) + "\n")
    with pytest.raises(InputError, match="each column once; repeated: gpu"):
        validate_training(path, default_calibration())


def test_a_shape_with_a_swiglu_width_and_no_size_is_read_gated() -> None:
    # Llama 3 70B's shape under another name: an FFN of 3.5 x hidden is no plain MLP (4 x)
    cells = {"layers": "80", "hidden": "8192", "ffn_hidden": "28672", "heads": "64"}
    model, notes = model_for({"model": "Custom 70B", "vocab": "128256", **cells}, "r")
    assert model.gated_mlp
    assert "gated MLP (SwiGLU) assumed: an FFN of 3.50 x hidden" in " ".join(notes)
    assert "KV heads not stated: one per query head" in " ".join(notes)
    # a GPT width stays a plain MLP
    gpt = {"layers": "96", "hidden": "12288", "ffn_hidden": "49152", "heads": "96"}
    model, notes = model_for({"model": "Custom 175B", **gpt}, "r")
    assert not model.gated_mlp


def test_model_parallel_degrees_that_do_not_divide_the_gpus_skip_the_row() -> None:
    # TP8 x PP3 = 24 on 64 GPUs: no whole number of replicas, so no plan uses them all
    with pytest.raises(SkipRow, match="tp x pp x cp = 24 GPUs does not divide the row's"):
        prepare(_row(tp="8", pp="3"), "test")
    with pytest.raises(SkipRow, match="tp x pp x cp = 128 GPUs is more than the row's"):
        prepare(_row(tp="8", pp="16"), "test")


def test_a_micro_batch_that_does_not_fit_the_batch_is_named() -> None:
    # DP2 x micro-batch 128 = 256 sequences a step against a global batch of 128
    pr = prepare(_row(tp="8", pp="4", dp="2", micro_batch="128"), "test")
    with pytest.raises(SkipRow, match="dp x micro-batch = 2 x 128 = 256 does not divide"):
        choose_plan(pr, default_calibration())


@pytest.mark.parametrize(
    ("cell", "mode"),
    [
        ("Distributed Data Parallel (DDP)", "none"),  # PyTorch DDP shards nothing
        ("DistributedDataParallel", "none"),
        ("torch.distributed DDP", "none"),
        ("DDP + distributed optimizer", "dist-opt"),
        ("DDP, dist-opt", "dist-opt"),
        ("DDP w/ dist opt", "dist-opt"),
        ("zero_stage=1", "zero1"),  # DeepSpeed's config key
        ("zero_stage: 3", "zero3"),
        ("ZeRO-3 (no offload)", "zero3"),
        # offloading said to be off
        ("ZeRO-3, offload: off", "zero3"),
        ("ZeRO-3 (offload disabled)", "zero3"),
        ("FSDP cpu_offload=False", "zero3"),
        ("ZeRO-3 without optimizer state offload", "zero3"),
    ],
)
def test_sharding_spellings_of_other_stacks(cell: str, mode: str) -> None:
    assert read_sharding(cell) == SHARDING.index(mode)


@pytest.mark.parametrize(
    "cell", ["ZeRO-3 + CPU offload", "FSDP (CPU offload)", "ZeRO-2 w/ offload"]
)
def test_offloading_to_the_host_skips_the_row(cell: str) -> None:
    with pytest.raises(SkipRow, match="offloading to host memory is not modelled"):
        read_sharding(cell)


@pytest.mark.parametrize(
    ("cell", "mode"),
    [
        ("none (selective for MoE)", "selective"),  # the bracket names the mode used
        ("none (no recompute)", "none"),
        # a mode the bracket says is off
        ("none (full recompute off)", "none"),
        ("none (no selective)", "none"),
        ("none (block method disabled)", "none"),
        ("none (partial offload)", "none"),
        ("full (1 layer per stage)", "partial"),  # Megatron's block wording
    ],
)
def test_recompute_cells_that_name_a_mode_after_none(cell: str, mode: str) -> None:
    assert read_recompute(cell) == mode


@pytest.mark.parametrize("cell", ["MX-FP8", "MX FP8", "mxfp8"])
def test_mx_formats_on_hopper_skip_the_row(cell: str) -> None:
    with pytest.raises(SkipRow, match="MX formats need"):
        prepare(_row(precision=cell), "test")


def test_gh200_runs_on_its_four_gpu_node_not_a_pcie_server() -> None:
    pr = prepare(_row(gpu="NVIDIA GH200", tp="4"), "test")
    s = pr.workload.system
    assert (s.key, s.gpus_per_node, s.nvlink_domain_gpus, s.scaleup_mesh) == (
        "gh200-quad",
        4,
        4,
        True,
    )
    # 4 Slingshot-11 NICs of 200 Gb/s: 25 GB/s a GPU
    assert s.nic_bw_Bps_per_gpu == 25e9


@pytest.mark.parametrize(
    ("cell", "target"),
    [
        ("Tokens/s/GPU", "tokens_per_s_per_gpu"),
        ("tokens per second per GPU", "tokens_per_s_per_gpu"),
        ("TFLOPS", "tflops_per_gpu"),
        ("TFLOP/s per GPU", "tflops_per_gpu"),
        ("MFU (%)", "mfu"),
        ("throughput", "throughput"),  # not a target: returned for the caller to refuse
        ("TGS", "tokens_per_s_per_gpu"),  # tokens per GPU per second
        ("tok/s/gpu", "tokens_per_s_per_gpu"),
        ("throughput (tokens/s/GPU)", "tokens_per_s_per_gpu"),
        ("Tokens per GPU per second", "tokens_per_s_per_gpu"),
        ("WPS", "tokens_per_s_per_gpu"),  # torchtitan's per-GPU tokens a second
        ("step time (s)", "tokens_per_s_per_gpu"),  # compared through measured_step_time_s
    ],
)
def test_target_labels_of_other_tables(cell: str, target: str) -> None:
    assert read_target(cell) == target


def test_a_target_label_of_another_table_scores_the_row_alike(tmp_path: Path) -> None:
    rows = [_row(id="a"), _row(id="b", target="Tokens/s/GPU")]
    rep = validate_training(_write(tmp_path, rows), default_calibration())
    assert [r.status for r in rep.rows] == ["scored", "scored"]
    assert rep.rows[0].predicted == rep.rows[1].predicted


@pytest.mark.parametrize(
    ("cell", "sp"),
    [
        ("✓", True),
        ("✔", True),
        ("✔\ufe0f", True),
        ("✅", True),
        ("✗", False),
        ("❌", False),
        ("Yes", True),
    ],
)
def test_a_ticked_or_crossed_sequence_parallel_cell_reads_as_yes_or_no(cell: str, sp: bool) -> None:
    pr = prepare(_row(tp="4", seq_parallel=cell), "test")
    assert pr.fixed["sp"] is sp


def test_a_blank_gpu_count_is_the_product_of_the_stated_degrees() -> None:
    pr = prepare(_row(num_gpus="", tp="8", pp="4", cp="2", dp="2"), "test")
    assert pr.workload.num_gpus == 8 * 4 * 2 * 2
    assert "GPU count not stated: tp x pp x cp x dp = 128" in pr.notes
    # a degree left blank leaves the count unknown: the row cannot be placed
    with pytest.raises(UnsupportedRowError, match="GPU count"):
        prepare(_row(num_gpus="", tp="8", dp="2"), "test")
    # a product beyond any cluster names the columns it came from
    with pytest.raises(UnsupportedRowError, match=r"tp x pp x cp x dp = 512,000,000 is more"):
        prepare(_row(num_gpus="", tp="8", pp="8", cp="8", dp="1000000"), "test")


def test_a_model_neither_in_the_catalog_nor_shaped_is_skipped_with_the_closest_names() -> None:
    with pytest.raises(UnsupportedRowError) as exc:
        prepare(_row(model="Phi-3-medium"), "test")
    assert str(exc.value).startswith(
        "model 'Phi-3-medium' is not in the catalog and the row gives no shape; did you mean "
    )
    assert "phi-3-mini" in str(exc.value)


def test_a_flop_target_whose_figure_is_missing_compares_the_other_flop_figure() -> None:
    # TFLOP/s named, only the MFU given (or the reverse): the same figure over the dense
    # peak, compared as the one given, and said so
    pr = prepare(
        _row(target="tflops_per_gpu", measured_tokens_per_s_per_gpu="", measured_mfu="0.4"), "t"
    )
    assert (pr.target, pr.measured) == ("mfu", 0.4)
    assert pr.notes[0] == "target tflops_per_gpu, only measured_mfu given: compared as mfu"
    pr = prepare(
        _row(target="mfu", measured_tokens_per_s_per_gpu="", measured_tflops_per_gpu="400"), "t"
    )
    assert (pr.target, pr.measured) == ("tflops_per_gpu", 400.0)
    # neither given: nothing to compare
    with pytest.raises(UnsupportedRowError, match="no measured_mfu value"):
        prepare(_row(target="mfu", measured_tokens_per_s_per_gpu=""), "t")


def test_a_recompute_layer_count_the_model_does_not_price_is_said() -> None:
    pr = prepare(_row(recompute="block (4 layers)"), "t")
    assert pr.fixed["recompute"] == RECOMPUTE.index("partial")
    assert (
        "recompute 'block (4 layers)': priced as the least partial recomputation that fits, "
        "not the layer count the row gives"
    ) in pr.notes
    assert not any("layer count" in n for n in prepare(_row(recompute="partial"), "t").notes)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Llama 3 (70B)", "llama3-70b"),  # the size in brackets is the model's
        ("LLaMA-2 (13B)", "llama2-13b"),
        ("Qwen3 (235B-A22B)", "qwen3-235b-a22b"),
        ("GPT-3 (1.3B)", "gpt3-1.3b"),  # not GPT-3 175B in a "1.3B" variant
        ("Mixtral 8x22B MoE", "mixtral-8x22b"),  # a descriptor after the name
        ("DeepSeek-V3 671B-A37B", "deepseek-v3"),  # the name, then its size again
    ],
)
def test_model_spellings_with_their_size(name: str, key: str) -> None:
    model, notes = model_for({"model": name}, "r")
    assert model.key == key
    assert not any("variant" in n for n in notes)


def test_a_name_whose_words_and_size_fit_one_catalog_model() -> None:
    # "DeepSeek 67B": deepseek-llm-67b is the one model whose names hold both words and
    # whose 67 B fit; "DeepSeek 7B" the 7B, not the 67B ("7b" is no word of its names)
    model, notes = model_for({"model": "DeepSeek 67B"}, "r")
    assert model.key == "deepseek-llm-67b"
    assert notes == [
        "model 'DeepSeek 67B' read as deepseek-llm-67b, the one catalog model whose names "
        "hold every word of it and whose size it states"
    ]
    assert model_for({"model": "DeepSeek 7B"}, "r")[0].key == "deepseek-llm-7b"
    # no size stated, or no model of that size: not read
    for name in ("DeepSeek LLM", "DeepSeek 12B"):
        with pytest.raises(SkipRow, match="not in the catalog"):
            model_for({"model": name}, "r")


def test_a_size_after_a_name_must_be_the_models() -> None:
    # DeepSeek-V3 is 671 B: "DeepSeek-V3 236B" names another model (V2's size)
    with pytest.raises(SkipRow, match="not in the catalog"):
        model_for({"model": "DeepSeek-V3 236B"}, "r")
    with pytest.raises(SkipRow, match="not in the catalog"):  # 37 B active, not 99
        model_for({"model": "DeepSeek-V3 671B-A99B"}, "r")


def test_an_moe_rows_size_may_be_its_active_parameters() -> None:
    # DeepSeek-V3: 671 B, 37 B active; Mixtral 8x7B: 46.7 B, 12.9 B active
    assert model_for({"model": "DeepSeek-V3", "params_b": "37"}, "r")[0].key == "deepseek-v3"
    assert model_for({"model": "Mixtral-8x7B", "params_b": "12.9"}, "r")[0].key == "mixtral-8x7b"
    with pytest.raises(SkipRow, match=r"has 46\.7 B parameters \(12\.9 B active\)"):
        model_for({"model": "Mixtral-8x7B", "params_b": "20"}, "r")


def test_an_moe_rows_ffn_width_equal_to_its_experts_is_no_dense_width() -> None:
    # Llama 4 Maverick's experts are 8,192 wide (Hugging Face's intermediate_size), its
    # dense layers 16,384 (intermediate_size_mlp): a row's 8192 restates the experts'
    base, _ = model_for({"model": "llama4-maverick"}, "r")
    model, notes = model_for({"model": "llama4-maverick", "ffn_hidden": "8192"}, "r")
    assert (model.ffn_hidden, model.dense_ffn_hidden) == (8192, 16384)
    assert param_count(model) == param_count(base)
    assert notes == ["ffn_hidden=8192: llama4-maverick's expert width, as the catalog's"]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),  # a release date
        ("Qwen3-235B-A22B-Thinking-2507", "qwen3-235b-a22b"),
        ("Phi-3-mini-128k-instruct", "phi-3-mini"),  # a context length
        ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b"),  # the weights' format
        ("moonshotai/Kimi-K2-Thinking", "kimi-k2.5"),  # a catalog alias as written first
    ],
)
def test_model_releases_of_the_same_shape(name: str, key: str) -> None:
    assert model_for({"model": name}, "r")[0].key == key


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("p5.48xlarge", "h100-sxm"),  # AWS: 8 x H100 SXM 80 GB
        ("A3 Mega (H100)", "h100-sxm"),  # Google Cloud
        ("p4d.24xlarge", "a100-sxm-40gb"),
        ("p5en.48xlarge", "h200"),
        ("p4de", "a100-sxm-80gb"),
        ("AWS p4de", "a100-sxm-80gb"),  # the cloud's name before the instance type
        ("Google Cloud A3 Mega", "h100-sxm"),
    ],
)
def test_cloud_instances_name_their_gpus(name: str, key: str) -> None:
    assert get_gpu(name).key == key


@pytest.mark.parametrize("name", ["A100 x 40", "V100 x 32", "MI300X x 192"])
def test_a_number_after_the_name_that_is_a_parts_memory_is_no_count(name: str) -> None:
    # "A100 x 40" may be the 40 GB part with its unit left out: neither read as 40 GPUs
    # nor as a part
    with pytest.raises(InputError):
        get_gpu(name)


def test_a_precision_cell_naming_both_formats_says_how_it_was_read() -> None:
    from gpuscale.validate.training_cells import read_precision

    h100 = get_gpu("h100-sxm")
    for cell in ("bf16/fp8", "BF16 + FP8", "fp8 (attention in bf16)"):
        notes: list[str] = []
        assert read_precision(cell, h100, notes) == "fp8"
        assert notes == [
            f"precision {cell!r} names a 16-bit format beside fp8: priced as fp8 GEMMs with "
            "the rest in 16-bit, as Transformer Engine runs them"
        ]
    for cell in ("BF16 (FP8 experts)", "FP8 (experts only)", "fp8 (MoE layers)"):
        notes = []
        assert read_precision(cell, h100, notes) == "fp8"
        assert notes == [
            f"precision {cell!r}: a part of the model in fp8, priced as fp8 GEMMs throughout"
        ]


def test_a_step_time_that_contradicts_the_tokens_per_second_is_said() -> None:
    # 128 x 8192 tokens on 64 GPUs: a step of 16.384 s is 1,000 tokens/s per GPU, as the
    # row says; one of 32.768 s is 500, 50 % below: the tokens/s is compared, and said
    agree = prepare(_row(measured_step_time_s="16.384"), "t")
    assert not any("measured_step_time_s" in n for n in agree.notes)
    pr = prepare(_row(measured_step_time_s="32.768"), "t")
    assert (
        "measured_step_time_s=32.768 gives 500 tokens/s per GPU (batch x sequence / (s x "
        "GPUs)), -50 % from the measured 1,000: the tokens/s is compared"
    ) in pr.notes


def test_a_degree_whose_remark_names_another_degree_skips_the_row() -> None:
    assert prepare(_row(tp="8 (TP)"), "t").fixed["tp"] == 8
    with pytest.raises(SkipRow, match=r"tp='8 \(PP\)': its remark names pp"):
        prepare(_row(tp="8 (PP)"), "t")


def test_a_vpp_cell_naming_the_schedule_in_words() -> None:
    # "interleaved" names the schedule, not its stages: VPP searched, as in the notes;
    # "1F1B" alone, no interleaving; "4 (interleaved)" is 4
    pr = prepare(_row(pp="4", tp="8", vpp="1F1B interleaved"), "t")
    assert "vpp" not in pr.fixed
    assert "interleaved schedule named, virtual stages not: VPP searched" in pr.notes
    one = prepare(_row(pp="4", tp="8", vpp="1F1B"), "t")
    assert one.fixed["vpp"] == 1 and "vpp '1F1B': 1F1B, no interleaving" in one.notes
    assert prepare(_row(pp="4", tp="8", vpp="4 (interleaved)"), "t").fixed["vpp"] == 4
