"""This project's model as an lm-evaluation-harness `LM` (what eval.py hands to lm-eval).

- `loglikelihood`: the continuation's log-probability given the context, from one forward of the last
  `max_length` tokens (lm-eval's own convention, as its HFLM does); `is_greedy` when every
  continuation token is the argmax.
- `loglikelihood_rolling`: a document's log-probability scored exactly as evaluate.py's `sliding`
  mode scores a stream (megatron/evaluation/scoring.py): the stream is the end-of-document token and
  the document; windows of `max_length` inputs advance by `stride` (default max_length: disjoint
  windows, lm-eval's convention), each target scored once.
- `generate_until`: greedy or sampled continuation with megatron.text_generation when it is there.

`max_length` is the evaluation length, any length the positional method supports (not capped at
max-position-embeddings). It bounds a window, it is not the window: a request shorter than it runs as
one window of its own length (a 60-token document is never padded to `max_length`), and before any
request of a kind is scored, the longest window among them is checked against the memory the device
has free (as evaluate.py checks its longest length up front, megatron/run/preflight.py), so a length the
device cannot hold is refused with the sizes instead of failing in the middle of a forward. Log-probabilities are over the tokenizer's vocabulary, as in training and
evaluate.py: the rows that pad the output layer are no tokens.
"""
import numpy as np
import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM

from megatron.device_memory import available_bytes
from megatron.text_generation import generate_tokens
from megatron.text_generation.memory import generation_memory_problem
from .run import EvaluationError
from .scoring import sliding_losses

GIB = 2 ** 30


class NeoXLM(TemplateLM):
    def __init__(self, model, tokenizer, *, max_length: int, stride: int | None = None, device="cpu",
                 max_gen_toks: int = 256):
        super().__init__()
        self.model, self.tokenizer, self._device = model, tokenizer, torch.device(device)
        self.max_length, self.stride = int(max_length), int(stride or max_length)
        self.max_gen_toks = max_gen_toks
        self.vocab_size = tokenizer.vocab_size

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eod

    def tok_encode(self, string: str, **kwargs) -> list[int]:
        return self.tokenizer.tokenize(string)

    def tok_decode(self, tokens) -> str:
        return self.tokenizer.detokenize(tokens)

    @torch.inference_mode()
    def _logits(self, tokens: list[int]) -> torch.Tensor:
        """log-softmax [s, vocab] (fp32) of one sequence."""
        logits = self.model(torch.tensor([tokens], device=self._device))[0, :, :self.vocab_size]
        return F.log_softmax(logits.float(), dim=-1)

    def check_window_fits(self, window: int, what: str) -> None:
        """Refuse, before it is allocated, a forward of `window` tokens the device cannot hold: at least one
        hidden state and the fp32 logits (preflight.memory_problem's lower bound; the weights are loaded)."""
        embedding = self.model.word_embeddings
        per_token = 4 * (embedding.embedding_dim + embedding.num_embeddings)
        available, kind = available_bytes()
        if window * per_token <= available:
            return
        raise EvaluationError(
            f"eval-task-length {self.max_length:,}: lm-eval's longest {what} is scored in a window of {window:,} "
            f"tokens, which needs at least {window * per_token / GIB:,.2f} GiB (one hidden state and the logits), "
            f"but there are {available / GIB:,.2f} GiB {kind}. Set eval-task-length to at most "
            f"{available // per_token:,} (longer requests are then scored in windows of that length), or run on a "
            "device with more memory.")

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        if requests:
            longest = max(len(context) + len(continuation) for _, context, continuation in requests)
            self.check_window_fits(min(longest - 1, self.max_length), "loglikelihood request (context and "
                                   "continuation)")
        out = []
        for _, context, continuation in requests:
            whole = (context + continuation)[-(self.max_length + 1):]
            logprobs = self._logits(whole[:-1])[-len(continuation):]  # [cont, vocab]
            target = torch.tensor(continuation, device=logprobs.device)
            picked = logprobs.gather(1, target[:, None])[:, 0]
            out.append((float(picked.sum()), bool((logprobs.argmax(dim=-1) == target).all())))
            self.cache_hook.add_partial("loglikelihood", (context, continuation), out[-1])
        return out

    def rolling_token_losses(self, tokens: list[int]) -> np.ndarray:
        """Per-token losses of `tokens` after the end-of-document token, by evaluate.py's `sliding` pass.

        A document of at most max_length tokens is one window of its own length (every target sees
        the whole document before it, which is what any stride would give it). A longer one is cut into
        chunks of max_length, the last padded at the end; causality keeps the padding out of every loss
        that is kept."""
        n = len(tokens)
        length, stride = (n, n) if n <= self.max_length else (self.max_length, self.stride)
        chunks = -(-n // length)
        stream = np.full(chunks * length + 1, self.eot_token_id, dtype=np.int64)
        stream[1:n + 1] = tokens
        starts = np.arange(chunks, dtype=np.int64) * length
        with torch.inference_mode():
            losses = sliding_losses(lambda x, **loss: self.model(x.to(self._device), **loss), stream, starts, length,
                                    stride=stride, batch_size=1, vocab_size=self.vocab_size)
        return losses.reshape(-1)[:n]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        documents = [self.tok_encode(request.args[0]) for request in requests]
        if documents:
            self.check_window_fits(min(max(map(len, documents)), self.max_length), "loglikelihood_rolling "
                                   "document")
        out = []
        for request, tokens in zip(requests, documents):
            (text,) = request.args
            value = -float(self.rolling_token_losses(tokens).astype(np.float64).sum())
            out.append(value)
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), value)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False):
        if requests:  # every request's KV cache before the first is generated (generate_tokens checks each)
            longest = max(min(len(self.tok_encode(r.args[0])), self.max_length) for r in requests)
            most = max(int((r.args[1] or {}).get("max_gen_toks", self.max_gen_toks)) for r in requests)
            embedding = self.model.word_embeddings
            problem = generation_memory_problem(
                num_layers=len(self.model.layers), hidden=embedding.embedding_dim, vocab=embedding.num_embeddings,
                dtype=embedding.weight.dtype, batch=1, longest_prompt=max(longest, 1), max_new_tokens=most,
                recompute=False, key="max_gen_toks", where="lm-eval's generate_until requests")
            if problem:
                raise EvaluationError(problem)
        out = []
        for request in requests:
            context, gen_kwargs = request.args
            kwargs = dict(gen_kwargs or {})
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.pop("max_gen_toks", self.max_gen_toks))
            sampling = bool(kwargs.pop("do_sample", False))
            temperature = float(kwargs.pop("temperature", 0.0)) if sampling else 0.0
            prompt = self.tok_encode(context)[-self.max_length:]
            tokens = generate(self.model, prompt, max_new, temperature=temperature, top_p=float(kwargs.get("top_p", 0.0)),
                              top_k=int(kwargs.get("top_k", 0)), eos=self.eot_token_id,
                              vocab_size=self.vocab_size)
            text = self.tok_decode(tokens)
            for stop in until:
                if stop and stop in text:
                    text = text[:text.index(stop)]
            out.append(text)
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
        return out


def generate(model, prompt, max_new_tokens, *, temperature, top_k, top_p, eos, vocab_size):
    """New tokens after `prompt` through generate.py's cached generator, the end-of-document token
    (where generation stopped on it) left out."""
    tokens = generate_tokens(model, [prompt], max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                             top_p=top_p, eos=eos, vocab_size=vocab_size)[0]
    return tokens[:-1] if tokens and tokens[-1] == eos else tokens
