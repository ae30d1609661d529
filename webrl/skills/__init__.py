"""webrl.skills: WebXSkill-style executable skills.

    skill.py      Skill / SkillStep / Target / SkillLibrary: skills as data, JSON files, resolution of
                  a step's target against a page's element list
"""
from webrl.skills.skill import (PARAM_TYPES, STEP_KINDS, BoundStep, Skill, SkillArgsError, SkillFileError,
                                SkillLibrary, SkillParam, SkillStep, Target, resolve_target, url_matches)

__all__ = ["PARAM_TYPES", "STEP_KINDS", "BoundStep", "Skill", "SkillArgsError", "SkillFileError", "SkillLibrary",
           "SkillParam", "SkillStep", "Target", "resolve_target", "url_matches"]
