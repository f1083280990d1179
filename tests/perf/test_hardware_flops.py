"""Hardware FLOPs: the model's and what recomputation runs again (perf/recompute.py), by hand."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli

from gpuscale.catalog import get_model
from gpuscale.perf.recompute import recompute_flops_per_token

GPT3 = get_model("gpt3-175b")
H, L, S = 12288, 96, 2048


def test_full_recompute_runs_the_layers_forward_again() -> None:
    # GPT-3 175B: 12 h^2 weights a layer (QKV, output, 4h MLP), 2 FLOPs each; the causal
    # attention core 2 x (s / 2 keys) x (h + h) a layer; the output layer is not rerun
    per_layer = 2 * 12 * H * H + 2 * (S / 2) * 2 * H
    assert recompute_flops_per_token(GPT3, S, "full", 1.0, ()) == pytest.approx(L * per_layer)
    # partial: the fraction of the layers the memory model recomputes
    quarter = recompute_flops_per_token(GPT3, S, "partial", 0.25, ())
    assert quarter == pytest.approx(0.25 * L * per_layer)
    assert recompute_flops_per_token(GPT3, S, "none", 0.0, ()) == 0.0


def test_selective_recompute_counts_its_modules() -> None:
    # the attention core (Korthikanti et al.): the scores and weighted sums alone
    core = L * 2 * (S / 2) * 2 * H
    assert recompute_flops_per_token(GPT3, S, "selective", 0.0, ("core_attn",)) == core
    # norms and activations add no FLOPs worth counting
    assert recompute_flops_per_token(GPT3, S, "selective", 0.0, ("layernorm",)) == 0.0
    # Mixtral 8x7B's whole MoE layer: router (h x 8) and 2 of 8 experts (3 h f, SwiGLU)
    mixtral = get_model("mixtral-8x7b")
    moe = 32 * 2 * (2 * 3 * 4096 * 14336 + 4096 * 8)
    got = recompute_flops_per_token(mixtral, 4096, "selective", 0.0, ("moe", "moe_act"))
    assert got == pytest.approx(moe)


def test_estimate_reports_hardware_tflops_under_recomputation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GPT-3 175B on 1,024 A100s, TP8 PP8, full recomputation: 4 forwards where the model
    # count has 3, the output layer's excepted (Narayanan et al. 2021's 140 TFLOP/s counts
    # these)
    args = ["train", "estimate", "--model", "gpt3-175b", "--gpu", "a100-sxm-80gb"]
    args += ["--gpus", "1024", "--seq-len", "2048", "--global-batch", "1536"]
    args += ["--tp", "8", "--pp", "8", "--recompute", "full"]
    code, out, err = run_cli([*args, "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    again = recompute_flops_per_token(GPT3, S, "full", 1.0, ())
    assert d["hardware_flops_per_token"] == pytest.approx(d["model_flops_per_token"] + again)
    ratio = d["hardware_flops_per_token"] / d["model_flops_per_token"]
    assert d["hardware_tflops_per_gpu"] == pytest.approx(d["model_tflops_per_gpu"] * ratio)
    code, out, _ = run_cli(args, capsys)
    assert code == 0 and "hardware TFLOP/s" in out
    # no recomputation: the two counts agree and the table leaves the row out
    args[-2:] = ["--recompute", "none"]
    code, out, _ = run_cli([*args, "--json"], capsys)
    d = json.loads(out)
    assert d["hardware_tflops_per_gpu"] == pytest.approx(d["model_tflops_per_gpu"])
    code, out, _ = run_cli(args, capsys)
    assert "hardware TFLOP/s" not in out


def test_full_recompute_reruns_the_mtp_depths_too() -> None:
    from gpuscale.perf.transformer import forward_flops_per_token, mtp_forward_flops_per_token

    # DeepSeek-V3's one MTP depth runs again with the layers (its output head does not), as
    # the step model prices it: the decoder layers' forward plus the depth's body
    m = get_model("deepseek-v3")
    head = 2 * 129280 * 7168
    decoder = forward_flops_per_token(m, 4096) - mtp_forward_flops_per_token(m, 4096) - head
    depth = mtp_forward_flops_per_token(m, 4096) - head
    got = recompute_flops_per_token(m, 4096, "full", 1.0, ())
    assert got == pytest.approx(decoder + depth)


def test_mla_up_projection_without_a_query_latent_reruns_the_query_projection() -> None:
    # DeepSeek-V2-Lite: no query latent (q_lora_rank 0), so the query projection from the
    # hidden state (2,048 -> 16 heads x 192) runs in the checkpoint with the KV
    # up-projection (512 -> 16 x (128 + 128)); 27 attention layers, no MTP
    m = get_model("deepseek-v2-lite")
    up = 2 * 27 * (2048 * 16 * 192 + 512 * 16 * 256)
    got = recompute_flops_per_token(m, 4096, "selective", 0.0, ("mla_up_proj",))
    assert got == pytest.approx(up)
