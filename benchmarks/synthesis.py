"""Synthesis measured on the sandbox, where the sites' world data and session state are ground
truth: `webrl synth` run on each sandbox site as if it were a user's unknown site, the share of
its tasks the sandbox confirms, and SFT from its demonstrations against SFT from the oracles.

    .venv/bin/python benchmarks/synthesis.py [--out benchmarks/results/synthesis_2026-12-01]
        [--sites shop travel wiki widgets] [--eval-tasks 48] [--epochs 5] [--seed 0] [--skip-sft]

1. Synthesis. One `synthesize` per site from its home page (`<server>/<site>/`), templates only
   (no endpoint), viewport 640x480 (the eval's), shown origin `SHOWN_ORIGIN` (what the oracle
   demos and the eval show). Per site: explored pages, proposed / refined / dropped (by reason)
   / kept, from its `SynthReport`.
2. Confirmation. Each kept demo's actions are replayed in a fresh episode of its task, loaded
   back with `load_synth_tasks(path, base_url=<this run's server>)`, through a `ProbeTask` that
   gives the episode a known sandbox session so its server state can be read afterwards.
     executable  the replay raises no action error, ends the episode, reaches the demo's final
                 state (URL + element-list digest of the last turn) and, where the task has a
                 synth checker, scores 1 on it.
     coherent    the goal's named entity / effect matches the sandbox's truth (`COHERENCE`):
       navigation  'Open the "X" page.': the final page is the world's page named X (a shop
                   category or the cart, a wiki category or article, a widgets link's target).
       item        'Open the page of "X".': the final page is entity X's page in the world data
                   (shop product, wiki article, widgets link) and the session recorded the visit.
       search      'Search for "X" and open its page.': as item, and the session recorded a
                   search whose query is X (shop listings' q, wiki searches).
       filter      'set "L" to "O"': shop: the session's last listing has filter L at O (and O
                   is a brand of the catalogue / a rating or sort label); widgets: the control
                   labelled L holds O in the session's values; travel (home form, no server
                   state before the search is sent): O is a value the world offers for L
                   (1-6 adults, a cabin) -- a weaker, world-only check.
       action      'Add "X" to the cart, choosing Size "S" and Colour "C".': the session cart
                   holds a line of the product named X with that size and colour.
       form        'Fill in "F" with "V" ... and press "B".': shop listing price filters: the
                   session's last listing has min_price / max_price = V; other forms: no rule
                   (counted not coherent, reason "no_rule").
3. SFT. The kept synthesised demos of all sites (T turns) against T turns of oracle demos
   (`record_demos`, the same sites, levels 0-1, train split, seed `--seed`; whole episodes in
   order, the last one cut to make T), each with `webrl sft` (`Trainer.run_sft`) from
   webrl:tiny-webagent-pointer, `--epochs` passes, batch 32, lr 1e-3, run.seed `--seed`, so both
   take the same optimizer steps; then `webrl eval` (`Trainer.run_eval`, greedy) on
   `--eval-tasks` held-out sandbox tasks (tasks.sites = the sites, level 0, eval_split train:
   new seeds), the same tasks before and after. One seed.

Departure: SynthAgent's own evaluation fine-tunes and tests on real sites; here the sandbox's
world data replaces a human check of task quality, so "coherent" is only as strict as the rules
above (a filter on the travel form is checked against the world's values, not server state).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

SITES = ("shop", "travel", "wiki", "widgets")
CATEGORIES = ("navigation", "item", "search", "filter", "action", "form")


# -- coherence: pure rules on the final page and the session state -----------------------------
def quoted(goal: str) -> list[str]:
    """The quoted names of a goal, in order: 'Open the page of "Blue Mug".' -> ["Blue Mug"]."""
    return re.findall(r'"([^"]*)"', goal)


def _norm(text: str) -> str:
    from webrl.envs.sites.common import normalize

    return normalize(text)


def page_entity(site: str, path: str, state: Any) -> Optional[tuple[str, str, str]]:
    """(kind, key, name) of the world entity whose page is `path` on `site`, or None."""
    parts = [p for p in path.split("/") if p]
    if site == "shop":
        from webrl.envs.sites.shop.catalog import CATEGORIES as SHOP_CATEGORIES, catalog_index

        if parts[1:2] == ["p"] and len(parts) == 3 and parts[2].isdigit() and int(parts[2]) in catalog_index():
            return "product", parts[2], catalog_index()[int(parts[2])].name
        if parts[1:2] == ["c"] and len(parts) == 3 and parts[2] in SHOP_CATEGORIES:
            return "category", parts[2], SHOP_CATEGORIES[parts[2]][0]
        if parts[1:] == ["cart"]:
            return "cart", "cart", "Cart"
    if site == "wiki":
        from webrl.envs.sites.wiki.app import KINDS
        from webrl.envs.sites.wiki.world import build_world

        if parts[1:2] == ["page"] and len(parts) == 3 and parts[2] in build_world():
            return "article", parts[2], build_world()[parts[2]].title
        if parts[1:2] == ["category"] and len(parts) == 3 and parts[2] in KINDS:
            return "category", parts[2], KINDS[parts[2]]
    if site == "widgets" and parts[1:2] == ["go"] and len(parts) == 3:
        layout = (state.params.get("layout") or {}).get("controls", []) if state is not None else []
        label = next((c["label"] for c in layout if c["id"] == parts[2] and c["kind"] == "link"), None)
        if label is not None:
            return "link", parts[2], label
    return None


def _visited(site: str, kind: str, key: str, state: Any) -> bool:
    if site == "shop" and kind == "product":
        return bool(state.shop.viewed) and state.shop.viewed[-1] == int(key)
    if site == "wiki" and kind == "article":
        return bool(state.wiki.visited) and state.wiki.visited[-1] == key
    if site == "widgets" and kind == "link":
        return bool(state.widgets.links) and state.widgets.links[-1] == key
    return False


def _open_named(site: str, goal: str, path: str, state: Any, need_visit: bool) -> tuple[bool, str]:
    names = quoted(goal)
    entity = page_entity(site, path, state)
    if not names or entity is None:
        return False, f"no world entity at {path}"
    kind, key, name = entity
    if _norm(name) != _norm(names[0]):
        return False, f"goal names {names[0]!r}, the page is {kind} {name!r}"
    if need_visit and not _visited(site, kind, key, state):
        return False, f"the session did not record the visit to {kind} {key}"
    return True, f"{kind} {name!r}"


def coherent_navigation(site, goal, path, state):
    return _open_named(site, goal, path, state, need_visit=False)


def coherent_item(site, goal, path, state):
    return _open_named(site, goal, path, state, need_visit=True)


def coherent_search(site, goal, path, state):
    ok, why = _open_named(site, goal, path, state, need_visit=True)
    name = _norm(quoted(goal)[0]) if quoted(goal) else ""
    searched = ([_norm(x["q"]) for x in state.shop.listings if x.get("q")] if site == "shop"
                else [_norm(q) for q in state.wiki.searches] if site == "wiki" else [])
    if ok and name not in searched:
        return False, f"the session recorded no search for {name!r} (searches: {searched})"
    return ok, why


def coherent_filter(site, goal, path, state):
    from webrl.envs.sites.shop.catalog import RATINGS, SORTS, build_catalog

    names = quoted(goal)
    label, option = _norm(names[-2]), names[-1]
    if site == "shop":
        last = state.shop.listings[-1] if state.shop.listings else {}
        recorded = {"brand": last.get("brand", ""), "rating": RATINGS.get(last.get("min_rating", ""), ""),
                    "sort by": SORTS.get(last.get("sort", ""), "")}
        if label == "brand" and option not in {p.brand for p in build_catalog()}:
            return False, f"{option!r} is not a brand of the catalogue"
        ok = label in recorded and _norm(recorded[label]) == _norm(option)
        return ok, f"last listing {label}={recorded.get(label, '?')!r}"
    if site == "widgets":
        controls = (state.params.get("layout") or {}).get("controls", [])
        control = next((c for c in controls if _norm(c["label"]) == label), None)
        value = state.widgets.values.get(control["id"], "") if control else ""
        return control is not None and _norm(value) == _norm(option), f"control value {value!r}"
    if site == "travel":
        from webrl.envs.sites.travel.world import CABINS

        offered = ({f"{n} adult" + ("" if n == 1 else "s") for n in range(1, 7)} if label == "passengers"
                   else {c[0] for c in CABINS.values()} if label == "cabin" else set())
        return option in offered, "world values only (no server state before the search)"
    return False, "no_rule"


def coherent_action(site, goal, path, state):
    from webrl.envs.sites.shop.catalog import catalog_index

    names = quoted(goal)
    if site != "shop" or not goal.startswith("Add "):
        return False, "no_rule"
    choosing = goal.split(", choosing ", 1)[1] if ", choosing " in goal else ""
    chosen = {label.lower(): value for label, value in re.findall(r'(\w+) "([^"]*)"', choosing)}  # Size "M"
    for (pid, size, colour), qty in state.shop.cart.items():
        product = catalog_index().get(pid)
        if product is not None and _norm(product.name) == _norm(names[0]) and qty > 0 \
                and size == chosen.get("size", size) and colour == chosen.get("colour", colour):
            return True, f"cart line {product.name!r} {size!r} {colour!r}"
    return False, f"cart {list(state.shop.cart)}"


SHOP_PRICE_FIELDS = {"minimum price": "min_price", "maximum price": "max_price"}


def coherent_form(site, goal, path, state):
    names = quoted(goal)
    fields = dict(zip([_norm(n) for n in names[0:-1:2]], names[1:-1:2]))
    if site == "shop" and fields and set(fields) <= set(SHOP_PRICE_FIELDS):
        last = state.shop.listings[-1] if state.shop.listings else {}
        ok = all(last.get(SHOP_PRICE_FIELDS[f], "") == v for f, v in fields.items())
        return ok, f"last listing {({k: last.get(k) for k in SHOP_PRICE_FIELDS.values()})}"
    return False, "no_rule"


COHERENCE = {"navigation": coherent_navigation, "item": coherent_item, "search": coherent_search,
             "filter": coherent_filter, "action": coherent_action, "form": coherent_form}
"""Task category -> (site, goal, final path, session state) -> (coherent, evidence)."""


# -- replay in a fresh episode with a readable session ---------------------------------------------
class ProbeTask:
    """Wraps a loaded `SynthWebTask`: the episode opens through the sandbox's /__session with a
    session of its own (seed 0, as the anonymous sessions synthesis browsed), so the server
    state can be read after the episode; every other hook is the synthesized task's."""

    def __init__(self, task: Any, site: str):
        from webrl.envs.sites.state import STORE, SessionState

        self.task, self.spec, self.sid = task, task.spec, uuid.uuid4().hex
        STORE.put(SessionState(sid=self.sid, site=site))

    def entry_url(self) -> str:
        from webrl.envs.sites.common import query_url
        from webrl.envs.task import origin

        start = urlparse(self.spec.start_url)
        return origin(self.spec.start_url) + query_url("/__session", sid=self.sid,
                                                       next=start.path + (f"?{start.query}" if start.query else ""))

    def __getattr__(self, name: str) -> Any:  # prepare, url_alias, setup, done, reward, oracle_action, teardown
        return getattr(self.task, name)


@dataclass
class Verdict:
    task_id: str
    site: str
    category: str
    executable: bool
    coherent: bool
    evidence: str


def replay(env: Any, task: Any, demo: Any, site: str) -> Verdict:
    """Replay `demo`'s actions for `task` (module docstring, step 2): one episode of the episode
    runner whose agent (`ReplayAgent`) takes them in order and stops at the first action error."""
    from webrl.envs.sites.state import STORE
    from webrl.rollout.episode import EpisodeInfraError, EpisodeSpec, run_episode
    from webrl.rollout.slots import GymSlot
    from webrl.synth.refine import ReplayAgent

    probe = ProbeTask(task, site)
    category = task.spec.params["category"]
    actions = [turn.action for turn in demo.turns]
    try:
        episode = run_episode(EpisodeSpec(probe, max_turns=len(actions)), GymSlot(env), ReplayAgent(actions, False))
    except EpisodeInfraError as error:
        STORE.drop(probe.sid)
        return Verdict(task.spec.id, site, category, False, False, f"replay: infrastructure error: {error}")
    last, final = episode.trajectory.turns[-1].observation, episode.final  # last: the page the last action was on
    error, terminated = final.observation["last_action_error"], final.terminated
    end = demo.turns[-1].observation
    same_end = (last.url, last.elements_text) == (end.url, end.elements_text)
    checker_ok = task.spec.params["checker"] is None or final.reward >= 1.0
    executable = not error and terminated and same_end and checker_ok
    state = STORE.get(probe.sid)
    ok, evidence = COHERENCE[category](site, task.spec.goal, urlparse(last.url).path, state) \
        if category in COHERENCE and state is not None else (False, "no_rule")
    STORE.drop(probe.sid)
    if not executable:
        evidence = f"replay: error={error!r} terminated={terminated} same_end={same_end} checker_ok={checker_ok}; " \
                   + evidence
    return Verdict(task.spec.id, site, category, executable, ok, evidence)


def share(verdicts: list[Verdict], key: str) -> dict[str, Any]:
    """{"n", "executable", "coherent", "both"} shares of `verdicts` grouped by `key` (site or category)."""
    groups: dict[str, list[Verdict]] = {}
    for v in verdicts:
        groups.setdefault(getattr(v, key), []).append(v)
    groups["all"] = list(verdicts)
    return {k: {"n": len(vs), "executable": _mean([v.executable for v in vs]),
                "coherent": _mean([v.coherent for v in vs]), "both": _mean([v.executable and v.coherent for v in vs])}
            for k, vs in groups.items()}


def _mean(xs: list) -> float:
    return sum(map(float, xs)) / len(xs) if xs else math.nan


# -- the pipeline ----------------------------------------------------------------------------------
def synthesize_sites(sites: list[str], base: str, out: Path, session: Any) -> dict[str, dict]:
    from webrl.envs.sites.server import SHOWN_ORIGIN
    from webrl.synth import SynthCommandConfig, synthesize

    reports = {}
    for site in sites:
        t0 = time.monotonic()
        config = SynthCommandConfig(start_url=f"{base}/{site}/", out=str(out / site), viewport="640x480",
                                    shown_origin=SHOWN_ORIGIN)
        report = synthesize(config, session=session)
        reports[site] = {**asdict(report), "wall_s": round(time.monotonic() - t0, 1)}
        print(f"[{site}] {report.line()}", flush=True)
    return reports


def confirm_sites(sites: list[str], base: str, out: Path, session: Any) -> list[Verdict]:
    from webrl.envs import WebEnv, WebEnvConfig
    from webrl.synth import load_synth_tasks
    from webrl.types import load_trajectories

    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "640x480"},
                                         "safety": {"subresource_policy": "allowlist"}}), session=session)
    verdicts = []
    try:
        for site in sites:
            tasks = {t.spec.id: t for t in load_synth_tasks(out / site / "tasks.jsonl", base_url=base)}
            for demo in load_trajectories(out / site / "demos.jsonl"):
                verdicts.append(replay(env, tasks[demo.task_id], demo, site))
    finally:
        env.close()
    return verdicts


def merged_demos(sites: list[str], out: Path, dest: Path) -> int:
    """All sites' kept synthesized demos in one `dest/demos.jsonl`; returns their turn count."""
    from webrl.types import load_trajectories, save_trajectories

    demos = [d for site in sites for d in load_trajectories(out / site / "demos.jsonl")]
    save_trajectories(dest / "demos.jsonl", demos, append=False)
    return sum(len(d.turns) for d in demos)


def first_turns(trajectories: list, n_turns: int) -> list:
    """Whole trajectories in order until `n_turns` turns, the last one cut to make exactly that
    many (fewer if there are not enough)."""
    out, left = [], n_turns
    for traj in trajectories:
        if left <= 0:
            break
        if len(traj.turns) > left:
            traj.turns = traj.turns[:left]
        out.append(traj)
        left -= len(traj.turns)
    return out


def oracle_demos(sites: list[str], n_turns: int, seed: int, dest: Path, work: Path, session: Any) -> int:
    from webrl.recipes.demos import record_demos
    from webrl.types import load_trajectories, save_trajectories

    episodes = max(8, n_turns // 2)  # level 0-1 oracle episodes average about 2-3 turns
    while True:
        record_demos(episodes, work, seed=seed, levels=[0, 1], sites=sites, split="train", viewport="640x480",
                     session=session)
        demos = load_trajectories(work / "demos.jsonl")
        if sum(len(d.turns) for d in demos) >= n_turns:
            break
        episodes *= 2
        (work / "demos.jsonl").unlink()
    kept = first_turns(demos, n_turns)
    save_trajectories(dest / "demos.jsonl", kept, append=False)
    return sum(len(d.turns) for d in kept)


def train_overrides(sites: list[str], eval_tasks: int, seed: int, run_dir: Path) -> list[str]:
    return ["model.path=webrl:tiny-webagent-pointer", f"tasks.sites=[{','.join(sites)}]", "tasks.eval_levels=[0]",
            "tasks.eval_split=train", f"tasks.eval_tasks={eval_tasks}", f"run.seed={seed}", f"run.run_dir={run_dir}",
            "eval.export_om2w=false"]


def evaluate(overrides: list[str]) -> dict[str, Any]:
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer

    summary = Trainer(load_config(WebRLConfig, None, overrides)).run_eval()
    return asdict(summary)


def sft(overrides: list[str], demos_dir: Path, epochs: int) -> str:
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [*overrides, f"sft.demos_dir={demos_dir}", f"sft.epochs={epochs}",
                                             "sft.batch_size=32"])
    return Trainer(config).run_sft()


def sft_comparison(sites: list[str], out: Path, work: Path, args: argparse.Namespace, session: Any) -> dict:
    synth_dir, oracle_dir = work / "sft_synth", work / "sft_oracle"
    turns = merged_demos(sites, out, synth_dir)
    oracle_turns = oracle_demos(sites, turns, args.seed, oracle_dir, work / "oracle_recorded", session)
    result: dict[str, Any] = {"turns": {"synth": turns, "oracle": oracle_turns}, "epochs": args.epochs,
                              "batch_size": 32, "optimizer_steps": args.epochs * -(-turns // 32)}
    result["before"] = evaluate(train_overrides(sites, args.eval_tasks, args.seed, work / "eval_before"))
    for name, demos in (("synth", synth_dir), ("oracle", oracle_dir)):
        path = sft(train_overrides(sites, args.eval_tasks, args.seed, work / f"sft_{name}_run"), demos, args.epochs)
        result[f"after_{name}"] = evaluate([*train_overrides(sites, args.eval_tasks, args.seed,
                                                             work / f"eval_{name}"), f"model.path={path}"])
    return result


# -- tables ----------------------------------------------------------------------------------------
def synthesis_table(reports: dict[str, dict]) -> str:
    rows = ["| site | explored pages | proposed | refined | dropped (by reason) | kept |", "|---|---|---|---|---|---|"]
    for site, r in reports.items():
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(r["dropped"].items())) or "-"
        refined = ", ".join(f"{k} {v}" for k, v in sorted(r["refined"].items())) or "0"
        rows.append(f"| {site} | {r['explored_pages']} | {sum(r['proposed'].values())} | {refined} | "
                    f"{sum(r['dropped'].values())} ({dropped}) | {r['kept']} |")
    return "\n".join(rows)


def confirmation_table(verdicts: list[Verdict]) -> str:
    rows = ["| site / category | N | executable | coherent | both |", "|---|---|---|---|---|"]
    for key in ("site", "category"):
        for name, s in share(verdicts, key).items():
            if key == "category" and name == "all":
                continue
            rows.append(f"| {name} | {s['n']} | {s['executable']:.2f} | {s['coherent']:.2f} | {s['both']:.2f} |")
    return "\n".join(rows)


def sft_table(result: dict) -> str:
    keys = sorted(set(result["before"]["per_site_level"]))
    rows = ["| held-out (greedy) | " + " | ".join(["overall", *keys]) + " |", "|---" * (len(keys) + 2) + "|"]
    for name in ("before", "after_synth", "after_oracle"):
        r = result[name]
        cells = [f"{r['success']:.3f}"] + [f"{r['per_site_level'].get(k, (math.nan, 0))[0]:.3f} "
                                          f"(N={r['per_site_level'].get(k, (0, 0))[1]})" for k in keys]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results/synthesis_2026-12-01")
    p.add_argument("--work", default="/tmp/synthbench/run", help="synthesis outputs, demos and run folders")
    p.add_argument("--sites", nargs="+", default=list(SITES), choices=SITES)
    p.add_argument("--eval-tasks", type=int, default=48)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-sft", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from webrl.envs import BrowserSession
    from webrl.envs.sites.server import ensure_server

    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    base, t0 = ensure_server(), time.monotonic()
    session = BrowserSession()
    try:
        reports = synthesize_sites(args.sites, base, work / "synth", session)
        verdicts = confirm_sites(args.sites, base, work / "synth", session)
        result: dict[str, Any] = {"command": " ".join([".venv/bin/python", "benchmarks/synthesis.py",
                                                       *(argv if argv is not None else sys.argv[1:])]),
                                  "synthesis": reports, "confirmation": {"by_site": share(verdicts, "site"),
                                                                         "by_category": share(verdicts, "category"),
                                                                         "verdicts": [asdict(v) for v in verdicts]}}
        print(synthesis_table(reports), confirmation_table(verdicts), sep="\n\n", flush=True)
        (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
        if not args.skip_sft:
            result["sft"] = sft_comparison(args.sites, work / "synth", work, args, session)
            print(sft_table(result["sft"]), flush=True)
    finally:
        session.close()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
