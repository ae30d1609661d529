"""`CascadePolicy`: decision heads first, the generator when the heads are unsure.

Per request (one prefill shared by both paths)::

    prefill(prompt)  -> hidden states, last logits, KV cache
    heads(hidden)    -> kind k*, target j*, value v*, confidence c
    c >= threshold   -> heads decide: render the action in the generator's format, generate nothing;
                        value = WRITE (type without a listed option, answer): feed the action's
                        prefix (e.g. `<tool_call>{"name": "browser", "arguments": {"action": "type",
                        "element": 5, "text": "`) into the same cache and let the generator decode
                        only the text, up to its stop token
    otherwise        -> the generator decodes from the same cache (greedy or sampled as configured)

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

Departures: requests are decided one at a time (a batched prefill with per-row continuation is
possible, but the tiny CPU models gain little); sampling in the cascade uses torch's RNG
directly, so sampled outputs match `GeneratorPolicy` in distribution, greedy ones exactly.

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
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from webrl.actions import Action
from webrl.chat.tokens import STOP_TOKENS
from webrl.policy.cascade.features import Prefill, StepFeatures, prefill, step_features
from webrl.policy.types import MarkedObservation, SoMElement
from webrl.policy.cascade.heads import KINDS_WITH_ELEMENT, DecisionHeads, HeadInputs
from webrl.policy.generator import SamplingConfig
from webrl.policy.images import ImageGeometry
from webrl.policy.stack import CascadeConfig
from webrl.policy.types import Decision, DecisionStats, PolicyRequest

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
# decoding from a prefilled cache
# ---------------------------------------------------------------------------------------------
def forward_tokens(model, cache, ids: Sequence[int]) -> torch.Tensor:
    """Feed `ids` after the cached prefix (no attention mask: batch of one, no padding); (k, V) logits."""
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(ids)], device=device), cache=cache, use_cache=True)
    return out.logits[0].float()


def pick_token(logits: torch.Tensor, sampling: SamplingConfig) -> int:
    """Argmax (greedy) or a sample from softmax(logits / T) with top-k / top-p truncation."""
    if sampling.greedy:
        return int(logits.argmax())
    scores = logits / sampling.temperature
    if sampling.top_k:
        kth = torch.topk(scores, min(sampling.top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_scores, order = scores.sort(descending=True)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        drop = cum - sorted_scores.softmax(-1) >= sampling.top_p  # keep the token that crosses top_p
        scores = scores.scatter(0, order[drop], float("-inf"))
    return int(torch.multinomial(scores.softmax(-1), 1))


def decode_from_cache(model, cache, first_logits: torch.Tensor, sampling: SamplingConfig,
                      stop_ids: Sequence[int], max_new_tokens: int,
                      suppress_ids: Sequence[int] = ()) -> tuple[list[int], list[float], str]:
    """Continue from a prefilled cache: (ids, log-probs under softmax(logits / T), finish reason).

    T = 1 for greedy (as `GeneratorPolicy` reports). Stops after the first stop id.
    suppress_ids are never picked (the vision placeholders, as `GeneratorPolicy` suppresses them:
    one sampled `<|image_pad|>` would break the learner's image-token count); log-probs are of
    the raw logits, as `GeneratorPolicy` reports them.
    """
    temperature = 1.0 if sampling.greedy else sampling.temperature
    ids, logps, logits = [], [], first_logits
    suppress = torch.tensor(list(suppress_ids), dtype=torch.long)
    for _ in range(max_new_tokens):
        token = pick_token(logits.index_fill(-1, suppress, float("-inf")) if len(suppress) else logits, sampling)
        ids.append(token)
        logps.append(float(torch.log_softmax(logits / temperature, -1)[token]))
        if token in stop_ids:
            return ids, logps, "stop"
        logits = forward_tokens(model, cache, [token])[-1]
    return ids, logps, "length"


def forced_logprobs(model, cache, first_logits: torch.Tensor, ids: Sequence[int],
                    temperature: float) -> tuple[list[float], torch.Tensor]:
    """Teacher-force `ids` after the cache (advancing it): (their log-probs, (V,) logits after the last)."""
    if not ids:
        return [], first_logits
    logits = forward_tokens(model, cache, ids)  # (k, V): position i predicts ids[i + 1]
    predicting = torch.cat([first_logits[None], logits[:-1]])  # (k, V): row i predicts ids[i]
    logp = torch.log_softmax(predicting / temperature, -1)
    return logp.gather(-1, torch.tensor(list(ids)).view(-1, 1)).flatten().tolist(), logits[-1]


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
        elements_known = isinstance(obs, MarkedObservation)
        pre = prefill(self.generator, request, self.heads.config.layer, keep_cache=True,
                      query_prefix=self.heads.config.query_prefix)
        proposal = Proposal(None, 0.0)
        if elements_known and self.config.threshold < 1.0:
            proposal = propose(self.heads, step_features(pre, obs, self.heads.config, self.generator),
                               obs, self.config.confidence)
        action = None  # the heads' action as the format writes it
        if (proposal.action is not None and self.config.threshold < 1.0
                and proposal.confidence >= self.config.threshold):
            action = format_action(proposal.action, proposal.element, self.format, pre.prompt.geometry)
        if action is not None:
            ids, logps, text, generated, finish = self._heads_path(pre, action, proposal.needs_text)
            decided_by = "heads+write" if proposal.needs_text else "heads"
        else:
            pre.rewind()
            s = self.generator.config.sampling
            ids, logps, finish = decode_from_cache(self.generator.model, pre.cache, pre.last_logits, s,
                                                   self.generator.stop_ids, s.max_new_tokens,
                                                   self.generator.suppress_ids)
            text, generated, decided_by = self._decode_text(ids), len(ids), "generator"
        parsed = self.format.parse(text, pre.prompt.geometry)
        if decided_by == "heads+write" and not isinstance(parsed, Action):
            # the written text broke the call (a raw newline in the JSON string, no closing quote):
            # the heads fixed kind and element, the text is what the generator wrote up to its quote
            prefix = self._write_prefix(action, pre.prompt.geometry)
            parsed = dataclasses.replace(action, text=written_text(text[len(prefix):]))
        stats = DecisionStats(prompt_tokens=len(pre.input_ids), response_tokens=len(ids),
                              latency_s=time.perf_counter() - t0, history_turns=len(request.history),
                              history_dropped=pre.prompt.history_dropped, images=len(pre.prompt.images),
                              over_budget=pre.prompt.over_budget, finish_reason=finish)
        return CascadeDecision(parsed=parsed, response_text=text, prompt_ids=list(pre.input_ids), response_ids=ids,
                               logprobs=logps, images=list(pre.prompt.images), stats=stats, decided_by=decided_by,
                               generated_tokens=generated, confidence=proposal.confidence, proposal=proposal.action)

    def _decode_text(self, ids: Sequence[int]) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        for tok in STOP_TOKENS[1:]:
            text = text.removesuffix(tok)
        return text

    def _write_prefix(self, action: Action, geometry: Optional[ImageGeometry]) -> str:
        rendered = self.format.render(action, geometry)
        return rendered[:rendered.index(WRITE_SENTINEL)]

    def _heads_path(self, pre: Prefill, action: Action,
                    needs_text: bool) -> tuple[list[int], list[float], str, int, str]:
        """(response ids, log-probs, text, generated tokens, finish) of a heads decision.

        The response is the format's rendering of `action` (coordinates written for this prompt's
        screenshot geometry), tokenised as the generator would have had to write it.
        """
        s, model = self.generator.config.sampling, self.generator.model
        temperature = 1.0 if s.greedy else s.temperature
        rendered = self.format.render(action, pre.prompt.geometry)
        prefix = rendered[:rendered.index(WRITE_SENTINEL)] if needs_text else rendered
        forced = self.tokenizer(prefix, add_special_tokens=False)["input_ids"]
        record = self.config.head_turns == "generator_logprobs"
        generated, finish = [], "stop"
        if needs_text:  # forced prefix through the cache, then the generator writes the text
            logps, next_logits = self._force(pre, forced, temperature)
            generated, gen_logps, finish = decode_from_cache(model, pre.cache, next_logits, s, self.generator.stop_ids,
                                                             self.config.max_text_tokens, self.generator.suppress_ids)
            ids, logps = forced + generated, logps + gen_logps
            text = prefix + self._decode_text(generated)
        else:
            ids, text = forced, rendered
            logps = self._force(pre, forced, temperature)[0] if record else []
        if not record:
            ids, logps = [], []
        return ids, logps, text, len(generated), finish

    def _force(self, pre: Prefill, ids: Sequence[int], temperature: float) -> tuple[list[float], torch.Tensor]:
        """Teacher-force `ids` right after the prompt: (log-probs, (V,) logits after the last).

        A query prefix already in the cache is reused when `ids` start with it; otherwise it is
        dropped from the cache first.
        """
        k, model = len(pre.prefix_ids), self.generator.model
        if k and list(ids[:k]) == pre.prefix_ids:
            predicting = torch.cat([pre.last_logits[None], pre.prefix_logits[:-1]])  # row i predicts ids[i]
            head = torch.log_softmax(predicting / temperature, -1).gather(
                -1, torch.tensor(pre.prefix_ids).view(-1, 1)).flatten().tolist()
            rest, logits = forced_logprobs(model, pre.cache, pre.prefix_logits[-1], ids[k:], temperature)
            return head + rest, logits
        pre.rewind()
        return forced_logprobs(model, pre.cache, pre.last_logits, ids, temperature)
