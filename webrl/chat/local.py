"""A local Qwen-VL chat engine (transformers `generate`) behind `prepare` / `generate`.

    engine = LocalChatEngine.from_pretrained(path)
    prompt = engine.prepare(messages)                         # token count known before generating
    completion = engine.generate(prompt, SamplingParams(max_tokens=64, temperature=0.0))

The same engine backs `webrl serve` (over HTTP) and the in-process judge backend, so a judge
gives the same reply whether it runs in-process or behind the server. Prompts are rendered by
the checkpoint's own chat template (`processor.apply_chat_template`).

Departures from an OpenAI server: one sequence per call (no batching across requests; calls
are serialised by a lock, so a busy server queues), `seed` reseeds torch's global generator
inside that lock, images use the checkpoint processor's own pixel limits.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from webrl.chat.messages import ChatMessage, Completion, SamplingParams
from webrl.types import Image


@dataclass
class PreparedPrompt:
    """Processor outputs of one prompt; `num_tokens` is the prompt length in tokens."""

    inputs: Any
    num_tokens: int


class ChatEngine(Protocol):
    """A model behind chat messages (what `webrl serve` and the in-process judge need): a name,
    prompt preparation (the token count is known before generating), generation."""

    model_name: str

    def prepare(self, messages: Sequence[ChatMessage]) -> PreparedPrompt: ...

    def generate(self, prompt: PreparedPrompt, sampling: SamplingParams) -> Completion: ...


def to_processor_messages(messages: Sequence[ChatMessage]) -> tuple[list[dict], list[Image]]:
    """Qwen chat-template messages (`{"type": "image"}` placeholders) and the images in order."""
    out, images = [], []
    for m in messages:
        parts = []
        for p in m.content:
            if isinstance(p, Image):
                parts.append({"type": "image"})
                images.append(p)
            else:
                parts.append({"type": "text", "text": p})
        out.append({"role": m.role, "content": parts})
    return out, images


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """(`text` cut before the earliest of the `stop` strings, whether one was found)."""
    cuts = [text.index(s) for s in stop if s and s in text]
    return (text[:min(cuts)], True) if cuts else (text, False)


class LocalChatEngine:
    """A Qwen2.5-VL / Qwen3-VL model and processor behind `prepare` / `generate`."""

    def __init__(self, model: Any, processor: Any, model_name: str = "local"):
        self.model, self.processor, self.model_name = model, processor, model_name
        self.lock = threading.Lock()
        """Orders generation on the model (shared with `webrl serve`'s native routes)."""

    @classmethod
    def from_pretrained(cls, path: str, model_name: str = "", dtype: str = "float32",
                        device: Optional[str] = None) -> "LocalChatEngine":
        import os

        from webrl.models import load_model

        model, processor = load_model(path, dtype=dtype, device=device)
        return cls(model, processor, model_name or os.path.basename(os.path.normpath(path)))

    def prepare(self, messages: Sequence[ChatMessage]) -> PreparedPrompt:
        chat, images = to_processor_messages(messages)
        text = self.processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        pil = [img.to_pil() for img in images] or None
        inputs = self.processor(text=[text], images=pil, return_tensors="pt")
        return PreparedPrompt(inputs, int(inputs["input_ids"].shape[1]))

    def generate(self, prompt: PreparedPrompt, sampling: SamplingParams) -> Completion:
        import torch

        inputs = prompt.inputs.to(self.model.device)
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_tokens}
        if sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                          top_k=sampling.top_k or None)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        tokenizer = self.processor.tokenizer
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=tokenizer)
        if sampling.logprobs:
            kwargs.update(return_dict_in_generate=True, output_logits=True)
        with self.lock, torch.no_grad():
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            out = self.model.generate(**inputs, **kwargs)
        sequences = out.sequences if sampling.logprobs else out
        new = sequences[0, prompt.num_tokens:]  # (R,)
        ids = new.tolist()
        eos = self.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        ended = bool(ids) and ids[-1] in eos
        text, stopped = cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), sampling.stop)
        finish = "stop" if (ended or stopped or len(ids) < sampling.max_tokens) else "length"
        completion = Completion(text, prompt.num_tokens, len(ids), finish)
        if sampling.logprobs:
            temperature = sampling.temperature if sampling.temperature > 0 else 1.0
            logits = torch.stack(out.logits, dim=1)[0, :len(ids)].float()  # (R, V) raw, before warpers
            logp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (R,)
            completion.token_ids, completion.logprobs = ids, logp.tolist()
            completion.tokens = [tokenizer.decode([i]) for i in ids]
        return completion

    def chat(self, messages: Sequence[ChatMessage], sampling: Optional[SamplingParams] = None) -> Completion:
        return self.generate(self.prepare(messages), sampling or SamplingParams())
