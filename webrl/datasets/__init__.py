"""Offline trajectory datasets -> webrl `Trajectory`s for SFT (`webrl sft sft.data=[...]`).

    from webrl.datasets import load_offline, FORMATS
    result = load_offline("gui360:/data/gui360/train.jsonl")   # or a bare PATH: format guessed
    result.trajectories   # list[Trajectory]: screenshots, typed Actions, decided_by="dataset"
    result.report.summary()   # {"files", "formats": {fmt: {rows, trajectories, steps, mapped, skipped}},
                              #  "skipped": [{file, row, step, reason}, ...]}

A spec is "FORMAT:PATH" or "PATH"; PATH is a file or a folder (every .json/.jsonl/.parquet file
under it, sorted). FORMATS and what each reads: `webrl.datasets.gui360` (GUI-360 raw and
processed), `.mind2web` (Mind2Web tasks, Multimodal-Mind2Web rows), `.openwebrl` (the recipe's
released SFT trajectories and their canonical episodes), `.sharegpt` (ShareGPT-with-images).
Options of a reader (e.g. point_space="pixels", image_root=...) pass through as keywords.

Turns answer in the compact grammar (`common.dataset_response`); pass `builder=policy.builder`
(a `PromptBuilder`) to have them answer in that policy's format instead (reasoning kept only
when its config thinks), which is what SFT on a policy needs: the prompt builder keeps a
dataset turn's text as it is, for its target and in later turns' history alike.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

from webrl.datasets import gui360, mind2web, openwebrl, sharegpt
from webrl.datasets.common import (ConversionReport, ConversionResult, DatasetError, SkippedStep, Unmappable,
                                   dataset_response, reasoning_of, read_rows, render_for_policy)

__all__ = ["ConversionReport", "ConversionResult", "DatasetError", "FORMATS", "SkippedStep", "Unmappable",
           "dataset_response", "guess_format", "load_offline", "parse_spec", "reasoning_of", "render_for_policy"]

_READERS = {"gui360": gui360.load, "mind2web": mind2web.load, "openwebrl": openwebrl.load,
            "sharegpt": sharegpt.load}
FORMATS = tuple(_READERS)
_SUFFIXES = (".json", ".jsonl", ".parquet")


def parse_spec(spec: str) -> tuple[Optional[str], Path]:
    """"FORMAT:PATH" -> (FORMAT, PATH); "PATH" -> (None, PATH). A prefix that looks like a
    format name (letters, digits, _ or -) but is none raises ValueError naming the allowed ones."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a dataset spec is 'FORMAT:PATH' or 'PATH', got {spec!r}")
    head, sep, tail = spec.partition(":")
    if sep and head and all(c.isalnum() or c in "_-" for c in head) and len(head) > 1:
        if head not in _READERS:
            raise ValueError(f"unknown dataset format {head!r} in {spec!r}; allowed: {', '.join(FORMATS)}")
        return head, Path(tail)
    return None, Path(spec)


def guess_format(path: Path) -> str:
    """The format of a file from its first row's keys; ValueError when none fits."""
    for _, row in read_rows(path):
        if "execution_id" in row or "step" in row or (isinstance(row.get("metadata"), dict)
                                                     and "task_type" in row["metadata"]):
            return "gui360"
        if "annotation_id" in row and ("actions" in row or "operation" in row):
            return "mind2web"
        if isinstance(row.get("metadata"), dict) and ("messages" in row["metadata"] or "rollout_idx" in row):
            return "openwebrl"
        if "tools" in row and isinstance(row.get("messages"), list):
            return "openwebrl"
        if "messages" in row or "conversations" in row:
            return "sharegpt"
        break
    raise ValueError(f"cannot tell the dataset format of {path}; write it as FORMAT:PATH with FORMAT one of "
                     f"{', '.join(FORMATS)}")


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in _SUFFIXES and p.is_file())
        if not files:
            raise ValueError(f"{path}: no {'/'.join(_SUFFIXES)} files in this folder")
        return files
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    return [path]


def load_offline(spec: str, *, builder: Any = None, **options: Any) -> ConversionResult:
    """Convert every file of `spec`; `builder` re-renders responses for a policy (module docstring).

    Raises ValueError for an unknown format, `DatasetError` (a ValueError) naming file and line
    for structural corruption; unmappable steps are only reported."""
    fmt, path = parse_spec(spec)
    report, trajectories = ConversionReport(), []
    for file in _files(path):
        reader = _READERS[fmt or guess_format(file)]
        allowed = [p for p in inspect.signature(reader).parameters if p not in ("path", "report")]
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(f"{file}: option(s) {unknown} not taken by the {reader.__module__} reader; "
                             f"allowed: {allowed}")
        trajectories += reader(file, report, **options)
        report.files.append(str(file))
    if builder is not None:
        trajectories, report.unrenderable = render_for_policy(trajectories, builder)
    return ConversionResult(trajectories, report)
