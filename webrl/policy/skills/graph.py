"""Skill organisation (WebXSkill stage 2): a URL-indexed skill graph and retrieval.

    graph = SkillGraph(library)                 # or SkillGraph.load("skills/graph.json") (GRAPH_FILE)
    graph.nodes                                 # page kinds: every url_pattern and leads_to
    graph.edges                                 # (from page kind, skill name, to page kind)
    graph.retrieve("http://h/shop/", "Search for a blue mug", k=3)     # list[Skill]
    graph.retrieve(url, goal, k=3, follow=True)  # + skills on the pages those skills lead to

Nodes are page kinds (URL patterns as `Skill.url_patterns` writes them, see webrl.skills.extract
`page_kind`); a skill is an edge from each page kind it starts on to the page kind it leads to
(`leads_to`; "" = unknown: the skill is still retrievable, it just leads nowhere in the graph).

Retrieval score (documented so that a ranking can be worked out by hand):
    score(skill) = |tokens(goal) & tokens(skill)|
    tokens(text) = lower-cased alphanumeric words of >= 2 characters, minus STOPWORDS
    tokens(skill) = tokens of its description, name, parameter names and descriptions, and its
                    steps' literal target names ("_" splits words)
Order: score descending, then replay rate descending, then name ascending. Only skills that
apply at the URL (`Skill.applies_to`) are candidates; a zero score is kept (applying at this page
is itself the graph's evidence). `follow=True` appends, after the applicable ones and ranked the
same way, the skills that start on a page kind one applicable skill leads to (not already listed);
k caps the whole list.

Interpretation of WebXSkill (its code is not public): the paper retrieves by URL then by the
task with an embedding or LLM; we use token overlap so retrieval is deterministic and runs on CPU.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Iterable, Optional

from webrl.envs.skills import Skill, SkillFileError, SkillLibrary

__all__ = ["STOPWORDS", "SkillGraph", "skill_tokens", "tokens"]

STOPWORDS = frozenset("the a an and or of to in on at for into from with by it its is be this that my me "
                      "then their them".split())


def tokens(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.casefold().replace("_", " ")) if len(w) >= 2} - STOPWORDS


def skill_tokens(skill: Skill) -> set[str]:
    parts = [skill.description, skill.name] + [f"{p.name} {p.description}" for p in skill.params]
    parts += [s.target.name for s in skill.steps if s.target is not None and "{" not in s.target.name]
    return tokens(" ".join(parts))


def _pattern_covers(node: str, pattern: str) -> bool:
    """Does the page kind `node` fall under the skill pattern `pattern` (equal, or the node as a path matches)?"""
    return node == pattern or fnmatch.fnmatchcase(node, pattern)


class SkillGraph:
    """Skills indexed by the page kinds they start on and lead to."""

    def __init__(self, skills: Iterable[Skill] | SkillLibrary = ()):
        self.library = skills if isinstance(skills, SkillLibrary) else SkillLibrary(skills)
        self._tokens = {s.name: skill_tokens(s) for s in self.library}

    @property
    def nodes(self) -> list[str]:
        kinds = {p for s in self.library for p in s.url_patterns} | {s.leads_to for s in self.library if s.leads_to}
        return sorted(kinds)

    @property
    def edges(self) -> list[tuple[str, str, str]]:
        return sorted((p, s.name, s.leads_to) for s in self.library for p in (s.url_patterns or ("*",)))

    def score(self, skill: Skill, goal: str) -> int:
        return len(tokens(goal) & self._tokens[skill.name])

    def _ranked(self, skills: Iterable[Skill], goal: str) -> list[Skill]:
        return sorted(skills, key=lambda s: (-self.score(s, goal), -s.replay_rate, s.name))

    def applicable(self, url: str) -> list[Skill]:
        return [s for s in self.library if s.applies_to(url)]

    def next_skills(self, skill: Skill) -> list[Skill]:
        """Skills that start on the page kind `skill` leads to (one edge followed)."""
        if not skill.leads_to:
            return []
        return [s for s in self.library if s.name != skill.name
                and (not s.url_patterns or any(_pattern_covers(skill.leads_to, p) for p in s.url_patterns))]

    def retrieve(self, url: str, goal: str, k: int = 3, follow: bool = False) -> list[Skill]:
        """Top-k skills for the page at `url` and the task `goal` (module docstring: the score)."""
        if k < 1:
            raise ValueError(f"SkillGraph.retrieve: k must be >= 1, got {k}")
        here = self._ranked(self.applicable(url), goal)
        out = here[:k]
        if follow and len(out) < k:
            seen = {s.name for s in here}
            onward = {s.name: s for h in here for s in self.next_skills(h) if s.name not in seen}
            out += self._ranked(onward.values(), goal)[:k - len(out)]
        return out

    # -- files --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"skills": [s.to_dict() for s in sorted(self.library, key=lambda s: s.name)],
                "nodes": self.nodes, "edges": [list(e) for e in self.edges]}

    def save(self, path: str | Path) -> Path:
        """One JSON file holding the skills and, for reading, the nodes and edges they imply."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "SkillGraph":
        """From `save`'s file, or from a skill library folder. Nodes and edges are recomputed from
        the skills (the file's copies are checked against them)."""
        path = Path(path)
        if path.is_dir():
            return cls(SkillLibrary.load(path))
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SkillFileError(f"{path}: not a skill graph JSON file: {e}") from None
        if not isinstance(data, dict) or not isinstance(data.get("skills"), list):
            raise SkillFileError(f"{path}: field 'skills' must be a list of skills")
        unknown = sorted(set(data) - {"skills", "nodes", "edges"})
        if unknown:
            raise SkillFileError(f"{path}: unknown field(s) {unknown}; allowed: ['edges', 'nodes', 'skills']")
        graph = cls(Skill.from_dict(d, where=f"{path}: skills[{i}]") for i, d in enumerate(data["skills"]))
        stored: Optional[list] = data.get("edges")
        if stored is not None and [tuple(e) for e in stored] != graph.edges:
            raise SkillFileError(f"{path}: field 'edges' does not match the skills' url_patterns / leads_to")
        return graph
