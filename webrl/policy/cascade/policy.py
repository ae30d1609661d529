"""`CascadePolicy`: decision heads first, the generator when the heads are unsure.

Per request, over the generator's backend (webrl/policy/backend.py: in process or on a server)::

    backend(prompt, hidden_layer)  -> the heads' hidden states (nothing sampled)
    heads(hidden)    -> kind k*, target j*, value v*, confidence c
    c >= threshold   -> heads decide: render the action in the generator's format, generate nothing;
                        value = WRITE (type without a listed option, answer): the action's prefix
                        (e.g. `<tool_call>{"name": "browser", "arguments": {"action": "type",
                        "element": 5, "text": "`) is forced after the prompt and the generator
                        decodes only the text, up to its stop token
    otherwise        -> the generator decodes (greedy or sampled as configured)

Each decision's requests share a prefix-cache namespace of their own (`cache_key`, SGLang's
`extra_key`): the heads request computes every prompt row (a prefix cached by another turn or
group member would leave the early rows out of a server's hidden states), and the second request,
whose prompt is the first's, reuses that prefill (SGLang's radix cache on a server, webrl's own in
process), so a deferral costs no second prefill (`DecisionStats.cached_tokens` says how many
prompt tokens were reused). The price: the heads request never reuses another turn's prefix.

A WRITE decision whose text breaks the call (a random generator may write a raw newline inside
the JSON string, or never close it) still executes the heads' kind and element, with the text read
up to the generator's closing quote (`written_text`); response ids and log-probs stay as sampled.

Confidence: the heads propose the most likely kind among those they can execute ("other" is
never proposed; its mass only lowers p(kind)), the best target (kinds with an element) and the
best value (kinds with text); c = product (or min, `confidence`) of those probabilities.
threshold 1.0 = generator only; 0.0 = heads always (when the page has the element the kind needs).

Every `CascadeDecision` records `decided_by` ("heads" | "heads+write" | "generator"),
`generated_tokens` (tokens sampled by the generator: 0 for a pure heads decision) and the
heads' proposal and confidence.

Head-decided turns in the policy-gradient batch (`head_turns`), since the generator did not
sample those action tokens:
- "generator_logprobs" (default): the turn's response ids are the action as rendered (forced
  prefix + any generated text) and its log-probs are the generator's, teacher-forced through the
  same cache (one parallel forward, no decoding). PPO then treats the turn as a generator sample
  whose behaviour probability is the generator's own: the ratio starts at 1, and the update moves
  the generator towards head actions in proportion to their advantage. Biased (the tokens were
  not drawn from the generator), bounded by the clip; every turn keeps its signal.
- "exclude": response ids and log-probs are empty (the text is still recorded), so the turn has
  no loss tokens; the trajectory's reward still reaches the generator's own turns. Unbiased for
  those turns, but fewer samples.

Over a server, the heads read the final layer only (`ENGINE_CAPABILITIES`), and forced ids are
scored at temperature 1 only: at another sampling temperature a head-decided turn's log-probs are
left empty and the learner computes them at the start of the update. Hidden states that lack the
prompt's first rows (a server that ignored the namespace) leave the decision to the generator.

Departures: requests are decided one at a time (a batched prefill with per-row continuation is
possible, but the tiny CPU models gain little); sampled outputs match `GeneratorPolicy` in
distribution, greedy ones exactly.

Coordinate formats (computer_use): a heads click on element k is written as the format's click
at the centre of k's box (`format_action`), in the format's coordinates (Qwen2.5-VL: pixels of
the smart-resized screenshot; Qwen3-VL: 0-1000), and recorded as the tokens of that text; the
executed action is that text parsed back (the point within half a model unit of the centre).
Element actions with no coordinate form (type into an element, select) go to the generator;
element-free ones (scroll, back, answer, stop) are written as they are.
"""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from webrl.actions import Action
from webrl.policy.cascade.features import Prefill, StepFeatures, prefill, step_features
from webrl.policy.cascade.heads import KINDS_WITH_ELEMENT, DecisionHeads, HeadInputs
from webrl.policy.images import ImageGeometry
from webrl.policy.seeds import sub_seed
from webrl.policy.stack import CascadeConfig
from webrl.policy.types import Decision, DecisionStats, MarkedObservation, PolicyRequest, SoMElement

WRITE_SENTINEL = "WEBRLWRITESLOT"


@dataclass
class CascadeDecision(Decision):
    """A `Decision` plus which path decided, tokens generated, and the heads' proposal.

    `proposal` is the heads' action as they chose it (element-addressed, e.g. click(12)); `parsed`
    is what the format wrote for it (in computer_use: a click at the element's centre).
    """

    decided_by: str = "generator"
    generated_tokens: int = 0
    confidence: float = 0.0
    proposal: Optional[Action] = None

    def to_turn(self, observation, policy_version: int = -1, decided_by: Optional[str] = None):
        return super().to_turn(observation, policy_version, decided_by or self.decided_by)


@dataclass
class Proposal:
    """The heads' best executable action (text = WRITE_SENTINEL when the generator must write it)."""

    action: Optional[Action]
    confidence: float
    needs_text: bool = False
    element: Optional[SoMElement] = None
    """The target element of kinds with one (its box places the click of a coordinate format)."""


# ---------------------------------------------------------------------------------------------
# heads' proposal
# ---------------------------------------------------------------------------------------------
def propose(heads: DecisionHeads, feats: StepFeatures, observation: MarkedObservation,
            confidence: str = "product") -> Proposal:
    """The heads' best executable action for one step and its confidence."""
    cfg = heads.config
    x = HeadInputs(feats.query[None], feats.elements[None], torch.ones(1, len(feats.element_ids), dtype=torch.bool),
                   torch.zeros(1, 0, heads.hidden_size), torch.zeros(1, 0, dtype=torch.bool))
    with torch.no_grad():
        out = heads(x)
    p_kind = out.kind[0].softmax(-1)
    feasible = [k for k in cfg.kinds if k != "other" and (k not in KINDS_WITH_ELEMENT or feats.element_ids)]
    if not feasible:
        return Proposal(None, 0.0)
    kind = max(feasible, key=lambda k: float(p_kind[cfg.kinds.index(k)]))
    probs = [float(p_kind[cfg.kinds.index(kind)])]
    element = None
    if kind in KINDS_WITH_ELEMENT:
        p_target = out.target[0].softmax(-1)
        j = int(p_target.argmax())
        probs.append(float(p_target[j]))
        element = observation.elements[j]
    text, needs_text = None, kind == "answer"
    if kind in ("type", "select"):
        opts = feats.options[observation.elements.index(element)]
        with torch.no_grad():
            out_v = heads(HeadInputs(x.query, x.elements, x.element_mask, opts[None],
                                     torch.ones(1, opts.shape[0], dtype=torch.bool)))
        p_value = out_v.value[0].softmax(-1)
        v = int(p_value.argmax())
        probs.append(float(p_value[v]))
        needs_text = v == 0
        text = None if needs_text else element.options[v - 1]
    conf = min(probs) if confidence == "min" else float(torch.tensor(probs).prod())
    return Proposal(_build_action(kind, element, WRITE_SENTINEL if needs_text else text, cfg.scroll_amount),
                    conf, needs_text, element)


def box_centre(bbox: Sequence[float], width: float, height: float) -> Optional[tuple[float, float]]:
    """Centre of the part of bbox = [x, y, w, h] inside a width x height screenshot (None: none is)."""
    x0, y0 = max(bbox[0], 0.0), max(bbox[1], 0.0)
    x1, y1 = min(bbox[0] + bbox[2], width), min(bbox[1] + bbox[3], height)
    if x1 <= x0 or y1 <= y0:
        return None
    return (x0 + x1) / 2, (y0 + y1) / 2


def format_action(action: Action, element: Optional[SoMElement], fmt,
                  geometry: Optional[ImageGeometry]) -> Optional[Action]:
    """The heads' action as `fmt` can write it, or None when it cannot.

    Element formats take it as is. A coordinate format (computer_use) cannot name an element:
    a left click on element k becomes a left click at the centre of k's box (screenshot pixels,
    clipped to the screenshot; the format writes it in its own coordinates, `ImageGeometry.to_model`).
    Other element actions (type into k, select) have no coordinate form: the generator decides.
    """
    if fmt.can_render(action):
        return action
    if action.kind != "click" or element is None or geometry is None:
        return None
    centre = box_centre(element.bbox, geometry.width, geometry.height)
    if centre is None:
        return None
    at = Action.click_at(*centre, button=action.button, clicks=action.clicks)
    return at if fmt.can_render(at) else None


def written_text(generated: str) -> str:
    """The JSON string content the generator wrote after a forced `"text": "` prefix, decoded.

    Read up to the first unescaped quote (or the end); control characters are accepted
    (json strict=False); undecodable escapes leave the raw text.
    """
    i, end = 0, len(generated)
    while i < len(generated):
        if generated[i] == "\\":
            i += 2
            continue
        if generated[i] == '"':
            end = i
            break
        i += 1
    raw = generated[:end]
    try:
        return json.loads('"' + raw + '"', strict=False)
    except ValueError:
        return raw


def _build_action(kind: str, element, text: Optional[str], scroll_amount: Optional[float]) -> Action:
    if kind == "click":
        return Action.click(element.id)
    if kind == "type":
        return Action.type_text(text, element.id)
    if kind == "select":
        return Action.select(element.id, text)
    if kind.startswith("scroll_"):
        return Action.scroll(kind.removeprefix("scroll_"), scroll_amount)
    if kind == "answer":
        return Action.answer(text)
    return Action(kind)  # back / stop


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------
class CascadePolicy:
    """`Policy` wrapping a `GeneratorPolicy` with trained `DecisionHeads`."""

    def __init__(self, generator, heads: DecisionHeads, config: Optional[CascadeConfig] = None):
        self.generator, self.heads = generator, heads.eval()
        self.config = config or CascadeConfig()
        self.format = generator.builder.format
        self.tokenizer = generator.tokenizer

    def act(self, requests: Sequence[PolicyRequest]) -> list[CascadeDecision]:
        return [self._act_one(r) for r in requests]

    def _act_one(self, request: PolicyRequest) -> CascadeDecision:
        t0 = time.perf_counter()
        obs = request.observation
        pre = prefill(self.generator, request, self.heads.config.layer, query_prefix=self.heads.config.query_prefix,
                      cache_key=uuid.uuid4().hex)  # a namespace of its own: every prompt row, then reused
        proposal = Proposal(None, 0.0)
        if isinstance(obs, MarkedObservation) and self.config.threshold < 1.0 and pre.complete:
            proposal = propose(self.heads, step_features(pre, obs, self.heads.config, self.generator),
                               obs, self.config.confidence)
        action = None  # the heads' action as the format writes it
        if proposal.action is not None and self.config.threshold < 1.0 and proposal.confidence >= self.config.threshold:
            action = format_action(proposal.action, proposal.element, self.format, pre.prompt.geometry)
        if action is not None:
            ids, logps, text, generated, finish, cached = self._heads_path(pre, action, proposal.needs_text,
                                                                           sub_seed(request.seed, "write"))
            decided_by = "heads+write" if proposal.needs_text else "heads"
        else:
            row = self.generator.request(pre.prompt, pre.input_ids, cache_key=pre.cache_key, seed=request.seed)
            out = self.generator.backend.generate([row])[0]
            ids, logps, finish, cached = list(out.ids), list(out.logprobs), out.finish, out.cached_tokens
            text, generated, decided_by = self.generator.text_of(ids), len(ids), "generator"
        parsed = self.format.parse(text, pre.prompt.geometry)
        if decided_by == "heads+write" and not isinstance(parsed, Action):
            # the written text broke the call (a raw newline in the JSON string, no closing quote):
            # the heads fixed kind and element, the text is what the generator wrote up to its quote
            prefix = self._write_prefix(action, pre.prompt.geometry)
            parsed = dataclasses.replace(action, text=written_text(text[len(prefix):]))
        stats = DecisionStats(prompt_tokens=len(pre.input_ids), response_tokens=len(ids),
                              latency_s=time.perf_counter() - t0, history_turns=len(request.history),
                              history_dropped=pre.prompt.history_dropped, images=len(pre.prompt.images),
                              over_budget=pre.prompt.over_budget, finish_reason=finish, cached_tokens=cached)
        return CascadeDecision(parsed=parsed, response_text=text, prompt_ids=list(pre.input_ids), response_ids=ids,
                               logprobs=logps, images=list(pre.prompt.images), stats=stats, decided_by=decided_by,
                               generated_tokens=generated, confidence=proposal.confidence, proposal=proposal.action)

    def _write_prefix(self, action: Action, geometry: Optional[ImageGeometry]) -> str:
        rendered = self.format.render(action, geometry)
        return rendered[:rendered.index(WRITE_SENTINEL)]

    def _heads_path(self, pre: Prefill, action: Action, needs_text: bool,
                    seed: Optional[int] = None) -> tuple[list[int], list[float], str, int, str, int]:
        """(response ids, log-probs, text, generated tokens, finish, cached prompt tokens) of a heads
        decision. The response is the format's rendering of `action` (coordinates written for this
        prompt's screenshot geometry), tokenised as the generator would have had to write it; its
        log-probs are the generator's, teacher-forced (head_turns "generator_logprobs"), or [] when
        the backend cannot score them at the sampling temperature (the learner then computes them)."""
        rendered = self.format.render(action, pre.prompt.geometry)
        prefix = rendered[:rendered.index(WRITE_SENTINEL)] if needs_text else rendered
        forced = self.tokenizer(prefix, add_special_tokens=False)["input_ids"]
        record = self.config.head_turns == "generator_logprobs"
        generated, gen_logps, finish, cached, forced_logps = [], [], "stop", 0, None
        if needs_text or record:  # the forced prefix after the prompt, then (WRITE) the generator writes
            row = self.generator.request(pre.prompt, pre.input_ids, forced_ids=forced,
                                         max_new_tokens=self.config.max_text_tokens if needs_text else 0,
                                         cache_key=pre.cache_key, seed=seed)
            out = self.generator.backend.generate([row])[0]
            forced_logps, cached = out.forced_logprobs, out.cached_tokens
            if needs_text:
                generated, gen_logps, finish = list(out.ids), list(out.logprobs), out.finish
        text = prefix + self.generator.text_of(generated) if needs_text else rendered
        ids = forced + generated
        logps = forced_logps + gen_logps if forced_logps is not None else []
        if not record:
            ids, logps = [], []
        return ids, logps, text, len(generated), finish, cached
