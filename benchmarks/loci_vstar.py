"""LOCI on synthetic V*-style questions: accuracy and role calls per question, with and without LOCI.

    .venv/bin/python benchmarks/loci_vstar.py [--items 20] [--seed 0] [--width 1600 --height 1200]
        [--endpoint URL --model NAME] [--locator URL] [--critic URL]
        [--family qwen2.5-vl] [--generator PATH] [--oracle-locator] [--max-rounds 3] [--json OUT]

Items (`webrl.policy.loci.synthetic`): small 5-letter words in coloured boxes on a large
cluttered canvas; "What word is written inside the small <colour> box?".
Models: `--endpoint` (any OpenAI-compatible server: answerer, and Locator/Critic unless
`--locator` / `--critic` name other URLs), else a local checkpoint `--generator PATH` (greedy,
roles with LOCI prompts), else the tiny random-init model of `--family` built here: the tiny
model is a plumbing check only (its replies never parse, its answers are random).
`--oracle-locator` replaces the Locator with one that returns the true box (a ceiling for the
Critic + answerer, and a check that the crop path preserves legibility).

Reported per mode ("baseline": one answerer call on the whole image; "loci"): accuracy, mean
role calls per question (answerer included), mean rounds, parse failures per question, share of
questions whose accepted crops cover the target box centre, wall seconds per question.

Measured 2026-11-30 on the shared 2-core CPU (load average 12.1 / 6.9 / 7.4 at the end), tiny
random-init Qwen2.5-VL, `--items 3 --width 800 --height 600 --max-new-tokens 16 --max-pixels 50176`
(plumbing check only, no accuracy meaning):

    mode        accuracy  calls/q  rounds  parse fail/q  covered     s/q
    baseline        0.00     1.00    0.00          0.00     0.00    1.35
    loci            0.00     7.00    3.00          6.00     0.00   17.63

calls/q = 1 answer + 3 rounds x 2 Locator calls (each reply malformed, retried once, then the
round proceeds without evidence; the Critic is never called without crops). No real Qwen-VL
checkpoint or endpoint was available in this session: accuracy with a real model is unmeasured.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webrl.policy.loci.policy import LociConfig  # noqa: E402
from webrl.policy.loci.roles import EndpointRole, ModelRole, loci_answer  # noqa: E402
from webrl.policy.loci.synthetic import SyntheticVqaConfig, is_correct, make_vqa_item  # noqa: E402


def oracle_locator(item):
    """A Locator returning the target box (normalised 0-1000, 5% margin) every round."""
    W, H = item.image.size
    x0, y0, x1, y1 = item.target_box
    mx, my = 0.05 * W, 0.05 * H
    box = [max(0, (x0 - mx)) * 1000 / W, max(0, (y0 - my)) * 1000 / H, min(W, x1 + mx) * 1000 / W,
           min(H, y1 + my) * 1000 / H]
    return lambda system, user, images: json.dumps({"boxes": [[round(v) for v in box]]})


def covers(evidence, box) -> bool:
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return any(c.box[0] <= cx < c.box[2] and c.box[1] <= cy < c.box[3] for c in evidence.crops)


def build_roles(a):
    """(answerer, locator, critic) for the chosen backend."""
    if a.endpoint:
        answerer = EndpointRole(a.endpoint, model=a.model, max_tokens=a.max_new_tokens)
        locator = EndpointRole(a.locator or a.endpoint, model=a.model, max_tokens=a.max_new_tokens)
        critic = EndpointRole(a.critic or a.endpoint, model=a.model, max_tokens=a.max_new_tokens)
        return answerer, locator, critic, a.family
    from webrl.models import load_model, model_family, tiny_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = a.generator or tiny_model(a.family, out_dir=Path(tempfile.mkdtemp()) / "tiny", seed=0)
    model, processor = load_model(path, device=a.device)
    role = ModelRole(model, processor, max_new_tokens=a.max_new_tokens, min_pixels=a.min_pixels,
                     max_pixels=a.max_pixels)
    return role, role, role, model_family(model)


def run(a) -> dict:
    answerer, locator, critic, family = build_roles(a)
    factor = 32 if family == "qwen3-vl" else 28
    cfg = LociConfig(max_rounds=a.max_rounds, factor=factor, crop_min_pixels=min(a.crop_min_pixels, a.max_pixels),
                     crop_max_pixels=a.max_pixels)
    vcfg = SyntheticVqaConfig(width=a.width, height=a.height)
    rows = {"baseline": [], "loci": []}
    for i in range(a.items):
        item = make_vqa_item(a.seed + i, vcfg)
        for mode in rows:
            t0 = time.perf_counter()
            loc = oracle_locator(item) if a.oracle_locator else locator
            res = loci_answer(item.image, item.question, answerer, loc, critic, cfg, use_loci=mode == "loci")
            s = res.evidence.stats
            rows[mode].append(dict(correct=is_correct(res.answer, item.answer), calls=res.calls, rounds=s.rounds,
                                   parse_failures=s.parse_failures, covered=covers(res.evidence, item.target_box),
                                   seconds=time.perf_counter() - t0, answer=res.answer[:40], truth=item.answer))
    summary = {}
    for mode, rs in rows.items():
        n = max(1, len(rs))
        summary[mode] = {k: sum(float(r[k]) for r in rs) / n
                         for k in ("correct", "calls", "rounds", "parse_failures", "covered", "seconds")}
    return {"summary": summary, "rows": rows, "family": family, "load": open("/proc/loadavg").read().split()[:3]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width", type=int, default=1600)
    p.add_argument("--height", type=int, default=1200)
    p.add_argument("--endpoint", default=None, help="OpenAI-compatible base URL incl. /v1")
    p.add_argument("--model", default="default", help="model name sent to the endpoint")
    p.add_argument("--locator", default=None)
    p.add_argument("--critic", default=None)
    p.add_argument("--family", default="qwen2.5-vl")
    p.add_argument("--generator", default=None, help="local checkpoint (default: tiny random model)")
    p.add_argument("--device", default=None)
    p.add_argument("--oracle-locator", action="store_true")
    p.add_argument("--max-rounds", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--min-pixels", type=int, default=1024)
    p.add_argument("--max-pixels", type=int, default=1024 * 28 * 28, help="per image, whole image and crops")
    p.add_argument("--crop-min-pixels", type=int, default=256 * 28 * 28)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    out = run(a)
    print(f"family {out['family']}, items {a.items}, {a.width}x{a.height}, load {' '.join(out['load'])}")
    print(f"{'mode':10s} {'accuracy':>9s} {'calls/q':>8s} {'rounds':>7s} {'parse fail/q':>13s} {'covered':>8s} {'s/q':>7s}")
    for mode, s in out["summary"].items():
        print(f"{mode:10s} {s['correct']:9.2f} {s['calls']:8.2f} {s['rounds']:7.2f} {s['parse_failures']:13.2f} "
              f"{s['covered']:8.2f} {s['seconds']:7.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
