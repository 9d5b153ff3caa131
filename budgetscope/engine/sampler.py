"""Next-token choice for a batch of logits: greedy, temperature, top-k, top-p, per-request seeds."""

from __future__ import annotations

import torch

from budgetscope.engine.sequence import Sequence


class Sampler:
    """Vectorised over the batch; only seeded requests draw row by row (each owns a torch.Generator)."""

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence], greedy: torch.Tensor | None = None) -> list[int]:
        """One token id per row of logits [S, vocab]; row i belongs to seqs[i]. `greedy`: their argmax, if known."""
        return self.sample(logits, seqs, greedy).tolist()

    def sample(self, logits: torch.Tensor, seqs: list[Sequence], greedy: torch.Tensor | None = None) -> torch.Tensor:
        """The ids of __call__ as an int64 tensor on the logits' device, without waiting for them."""
        params = [s.params for s in seqs]
        greedy = logits.argmax(dim=-1) if greedy is None else greedy
        if all(p.is_greedy for p in params):
            return greedy
        device, vocab = logits.device, logits.shape[-1]
        temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], device=device)
        logits = logits / temps[:, None]
        if any(p.top_k or p.top_p < 1.0 for p in params):
            logits = self._filter(logits, params, vocab)
        probs = torch.softmax(logits, dim=-1)
        drawn = torch.multinomial(probs, 1).squeeze(1)
        for i, (seq, p) in enumerate(zip(seqs, params)):
            if p.seed is not None and not p.is_greedy:
                if seq.generator is None:
                    seq.generator = torch.Generator(device=device).manual_seed(p.seed)
                drawn[i] = torch.multinomial(probs[i], 1, generator=seq.generator)[0]
        is_greedy = torch.tensor([p.is_greedy for p in params], device=device)
        return torch.where(is_greedy, greedy, drawn)

    @staticmethod
    def _filter(logits: torch.Tensor, params, vocab: int) -> torch.Tensor:
        """Mask all but each row's top_k tokens and its smallest set of mass >= top_p."""
        device = logits.device
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        top_k = torch.tensor([p.top_k or vocab for p in params], device=device)
        top_p = torch.tensor([p.top_p for p in params], device=device)
        mask = torch.arange(vocab, device=device)[None, :] >= top_k[:, None]
        sorted_probs = torch.softmax(sorted_logits.masked_fill(mask, float("-inf")), dim=-1)
        mask |= (sorted_probs.cumsum(dim=-1) - sorted_probs) > top_p[:, None]
        sorted_logits = sorted_logits.masked_fill(mask, float("-inf"))
        return torch.empty_like(logits).scatter_(1, order, sorted_logits)
