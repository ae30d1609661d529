"""webrl.skills: WebXSkill-style executable skills.

    skill.py      Skill / SkillStep / Target / SkillLibrary: skills as data, JSON files, resolution of
                  a step's target against a page's element list
    extract.py    extract_skills: successful trajectories -> mined, abstracted, validated skills
    steps.py      robust steps (RawStep, robust_steps) and page kinds, extraction's input
    abstract.py   a mined window's occurrences -> one parameterised Skill; matching a skill back
    graph.py      SkillGraph: skills indexed by the page kinds they start on and lead to; retrieve()
    guided.py     SkillGuidedPolicy / SkillsConfig: the "skills" policy wrapper (guided mode)
    commands.py   `webrl skills extract` (SkillsCommandConfig, skills_main) and WebEnvReplay
"""
from webrl.skills.extract import ExtractionConfig, ExtractionResult, extract_skills, validate
from webrl.policy.skills.graph import SkillGraph
from webrl.policy.skills.guided import SkillGuidedPolicy, SkillsConfig
from webrl.envs.skill_matching import resolve_target, url_matches
from webrl.envs.skills import (PARAM_TYPES, REPORT_FILE, STEP_KINDS, BoundStep, Skill, SkillArgsError,
                                SkillFileError, SkillLibrary, SkillParam, SkillStep, Target)

__all__ = ["PARAM_TYPES", "REPORT_FILE", "STEP_KINDS", "BoundStep", "ExtractionConfig", "ExtractionResult", "Skill",
           "SkillArgsError", "SkillFileError", "SkillGraph", "SkillGuidedPolicy", "SkillLibrary", "SkillParam",
           "SkillStep", "SkillsConfig", "Target", "extract_skills", "resolve_target", "url_matches", "validate"]
