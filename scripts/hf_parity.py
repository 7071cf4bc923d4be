#!/usr/bin/env python3
"""Compare memra's logits with Hugging Face transformers, token by token.

For each Hugging Face checkpoint folder given, memra greedy-decodes STEPS
tokens after a prompt and records the logits of every step (`memra logits`);
transformers then runs the same tokens (prompt + memra's choices) in one
teacher-forced forward pass, and the two are compared per step: cosine of the
logits, and whether transformers' argmax is the token memra chose.

Passes when every step has cosine >= --min-cos and the same greedy token,
except near-ties (--tie-tol: a fixed logit margin; --tie-sigma: a margin in
units of the step's RMS logit difference).
Needs torch and transformers (the GPU machine has both). Usage:

  scripts/hf_parity.py --memra ./memra --device cuda --steps 64 DIR [DIR ...]

Gemma 2 and 3 (Gemma2ForCausalLM, Gemma3ForCausalLM) run with transformers'
eager attention (--attn-impl auto), the one that applies their score
soft-capping and sliding window; a window shorter than the prompt and the
steps makes the comparison cover it, e.g.

  bin/memra synth --preset gemma2-9b --quant bf16 --layers 2 --sliding-window 32 --format hf -o /tmp/hf-gemma2
  bin/memra synth --preset gemma3-12b --quant bf16 --layers 6 --sliding-window 32 --format hf -o /tmp/hf-gemma3
  scripts/hf_parity.py --memra bin/memra --device cuda --steps 64 --exact /tmp/hf-gemma2 /tmp/hf-gemma3

Mixture-of-experts checkpoints (Qwen3MoeForCausalLM, MixtralForCausalLM;
transformers >= 4.51 for Qwen3-MoE) load the same way. For them transformers
also returns every layer's router logits (output_router_logits), and the
table gives the smallest gap between a token's last chosen expert and the
best one left out, over all layers and tokens ("router gap"): where that gap
is within float rounding, memra and transformers may choose different
experts for that token, and the logits after it differ by more than the
products' rounding. With random weights the gap is rarely below 1e-4.
The synthesized MoE checkpoints and the commands, on the GPU machine:

  memra synth --preset qwen3-30b-a3b --quant bf16 --layers 2 --format hf -o /tmp/hf-qwen3moe
  memra synth --preset mixtral-8x7b --quant bf16 --layers 2 --format hf -o /tmp/hf-mixtral
  scripts/hf_parity.py --memra .gpu/memra --device cuda --steps 64 --exact /tmp/hf-qwen3moe /tmp/hf-mixtral
  scripts/hf_parity.py --memra .gpu/memra --device cuda --steps 64 --tie-tol 0.02 --tie-sigma 3 /tmp/hf-qwen3moe /tmp/hf-mixtral
  scripts/hf_parity.py --memra .gpu/memra --device cpu --steps 8 --exact /tmp/hf-qwen3moe-small

(the last with a small model: memra synth ... --layers 2 --dim 512 --format hf; memra's CPU
reference against transformers, no GPU needed but slow).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def memra_logits(memra, model_dir, device, steps, prompt_ids, out, extra):
    cmd = [memra, "logits", model_dir, "--device", device, "--steps", str(steps),
           "--prompt-ids", " ".join(map(str, prompt_ids)), "-o", out] + extra
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "ids.txt")) as f:
        prompt = [int(x) for x in f.readline().split()]
        gen = [int(x) for x in f.readline().split()]
    logits = np.fromfile(os.path.join(out, "logits.f32"), dtype="<f4").reshape(len(gen), -1)
    return prompt, gen, logits


def attn_impl(model_dir, choice):
    """The attention implementation transformers runs: --attn-impl, or for
    auto eager for Gemma (its soft-capping and sliding window) and the
    library's default for the others (None)."""
    if choice != "auto":
        return choice
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model_type = cfg.get("model_type", "") or cfg.get("text_config", {}).get("model_type", "")
    return "eager" if model_type.startswith("gemma") else None


def is_moe(config):
    """Whether a transformers config is a mixture of experts (Qwen3-MoE, Mixtral)."""
    return getattr(config, "num_experts_per_tok", None) is not None


def router_gap(router_logits, k):
    """The smallest gap, over layers and tokens, between the k-th largest
    router logit (the last expert chosen) and the (k+1)-th (the best left
    out): how close the choice of experts came to flipping."""
    gap = float("inf")
    for layer in router_logits:
        r = layer.float().reshape(-1, layer.shape[-1])
        if r.shape[-1] <= k:
            continue
        top = torch.topk(r, k + 1, dim=-1).values
        gap = min(gap, float((top[:, k - 1] - top[:, k]).min()))
    return gap


def hf_logits(model_dir, ids, dtype, impl=None):
    """transformers' logits of ids, and for a mixture of experts the router gap."""
    kw = {"attn_implementation": impl} if impl else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kw)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, **kw)
    model = model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    gap = float("nan")
    with torch.no_grad():
        x = torch.tensor([ids], device=model.device)
        # one teacher-forced pass: no cache (Gemma's hybrid sliding-window cache included)
        if is_moe(model.config):
            res = model(x, use_cache=False, output_router_logits=True)
            gap = router_gap(res.router_logits, model.config.num_experts_per_tok)
        else:
            res = model(x, use_cache=False)
        out = res.logits[0].float().cpu().numpy()
    return out, gap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--memra", default="./memra")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt-ids", default="1 450 4996 17354 1701 29916 432 17204 975 278 17366 11203")
    ap.add_argument("--min-cos", type=float, default=0.999)
    ap.add_argument("--dtype", default="float32", help="transformers compute dtype")
    ap.add_argument("--attn-impl", default="auto",
                    help="transformers attn_implementation (eager, sdpa, …); auto: eager for Gemma, the default otherwise")
    ap.add_argument("--exact", action="store_true",
                    help="memra with a float32 KV cache and float32 prefill (its exact configuration)")
    ap.add_argument("--tie-tol", type=float, default=0.0,
                    help="accept a different greedy token when transformers' logits of the two differ by at most this")
    ap.add_argument("--tie-sigma", type=float, default=0.0,
                    help="also accept it when they differ by at most this many times the RMS difference of the two "
                         "logit rows at that step (the numerical class's own noise)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows, ok_all = [], True
    for d in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            # Keep prompt ids inside every vocabulary we synthesize.
            prompt_ids = [int(x) for x in args.prompt_ids.split()]
            prompt, gen, ml = memra_logits(args.memra, d, args.device, args.steps, prompt_ids, tmp,
                                           ["--exact"] if args.exact else [])
        seq = prompt + gen[:-1]
        hl, rgap = hf_logits(d, seq, dtype, attn_impl(d, args.attn_impl))
        n = len(prompt)
        cos, same, gap, sigma, flips_ok = [], 0, 0.0, 0.0, True
        for i in range(len(gen)):
            h = hl[n - 1 + i][: ml.shape[1]]
            m = ml[i]
            c = float(np.dot(h, m) / (np.linalg.norm(h) * np.linalg.norm(m)))
            cos.append(c)
            best = int(np.argmax(h))
            if best == gen[i]:
                same += 1
            else:
                g = float(h[best] - h[gen[i]])
                rms = float(np.sqrt(np.mean((h - m) ** 2)))
                gap = max(gap, g)
                sigma = max(sigma, g / rms if rms > 0 else float("inf"))
                flips_ok &= g <= args.tie_tol or g <= args.tie_sigma * rms
        ok = min(cos) >= args.min_cos and flips_ok
        ok_all &= ok
        rows.append((os.path.basename(d.rstrip("/")), len(gen), same, gap, sigma, min(cos), rgap, "pass" if ok else "FAIL"))
    print(f"{'model':<28} {'steps':>5} {'same':>5} {'worst gap':>9} {'gap/rms':>7} {'min cos':>9} {'router gap':>10}  result")
    for r in rows:
        print(f"{r[0]:<28} {r[1]:>5} {r[2]:>5} {r[3]:>9.4f} {r[4]:>7.2f} {r[5]:>9.6f} {r[6]:>10.3g}  {r[7]}")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
