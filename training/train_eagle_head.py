"""Train the EAGLE-1 draft head shipped for the bundled model (runner_impl/assets/gsm8k-tiny-eagle).

    python training/train_eagle_head.py --config training/eagle_head.yaml \
        --out runner_impl/assets/gsm8k-tiny-eagle [--time-budget-s 900]
    python training/train_eagle_head.py --eval-only --out runner_impl/assets/gsm8k-tiny-eagle

Why a head at all: vLLM's Model Runner V2 speculates only with eagle / eagle3 / mtp / dflash /
dspark (0.26), so spec decode on the bundled model needs a draft of that kind.

What it is: vLLM 0.26's `EagleLlamaForCausalLM` (vllm/model_executor/models/llama_eagle.py):
`fc` over cat(embed(token), target hidden), one Llama decoder layer without its input
RMSNorm, output = hidden + residual with no final norm; the token embedding and the lm_head
are the target's (vLLM shares them when the checkpoint has none). The head at position i
reads embed(x[i+1]) and the target's final (post-norm) hidden state h[i] and predicts
x[i+2]; when drafting further it feeds its own output back as the hidden state.

How it is trained: on GSM8K-format problems of training seeds (never held-out ones), in the
format the bundled model was trained on, with the bundled model's OWN hidden states as
features and its OWN greedy predictions as labels (EAGLE's loss: smooth-L1 on the next
feature + cross-entropy through the frozen lm_head; features with a little Gaussian noise,
so drafting on its own features does not drift). Labels from the target rather than from
the text: a draft is accepted when it equals what the target says, right or wrong.

How it is judged (`--eval-only`, and after training): greedy chain drafting against the
target on held-out problems, recomputed from scratch at every verify step (no cache, so no
cache bug can flatter it): vLLM's mean acceptance length AL = 1 + accepted / verify steps,
and per-position acceptance rates, at each k of the recipe.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mrbench.runner_impl.default_model import default_model_dir  # noqa: E402
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS, TRAIN_SEEDS, check_split, generate  # noqa: E402
from mrbench.workloads.gsm8k_scoring import PROMPT, STOP  # noqa: E402


# ---- the head: vLLM 0.26's EAGLE-1 module, in transformers' Llama layers -----------------
class EagleHead(torch.nn.Module):
    """Parameter names are the checkpoint's: `fc.weight`, `layers.0.*`."""

    def __init__(self, config) -> None:
        from transformers.models.llama.modeling_llama import (LlamaDecoderLayer,
                                                              LlamaRotaryEmbedding)
        super().__init__()
        h = config.hidden_size
        self.fc = torch.nn.Linear(2 * h, h, bias=False)
        layer = LlamaDecoderLayer(config, layer_idx=0)
        layer.input_layernorm = torch.nn.Identity()          # EAGLE skips it (vLLM too)
        self.layers = torch.nn.ModuleList([layer])
        self.rotary = LlamaRotaryEmbedding(config)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """[B, L, h] embeddings of x[i+1] and target hidden h[i] -> [B, L, h] features
        (causal over L; a row's padding at its end never reaches its real positions)."""
        x = self.fc(torch.cat([embeds, hidden], dim=-1))
        pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        out = self.layers[0](x, attention_mask=None, position_ids=pos,
                             position_embeddings=self.rotary(x, pos))
        return out[0] if isinstance(out, tuple) else out


def head_config(target_config):
    """The target's config with one layer: what vLLM wraps into EAGLEConfig."""
    import copy
    cfg = copy.deepcopy(target_config)
    cfg.num_hidden_layers = 1
    cfg._attn_implementation = "sdpa"
    return cfg


def load_target(model_dir: Path):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    return model.eval()


# ---- data: GSM8K-format problems, the target's own hidden states and predictions -------
def greedy_sequences(seeds: tuple[int, ...], per_seed: int, max_tokens: int
                     ) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the bundled model's greedy output ids) for the first `per_seed`
    problems of each seed, through runner_impl V2 (the greedy path the harness serves)."""
    from mrbench.runner_impl import LLM, SamplingParams
    prompts = [PROMPT.format(question=p.question) for s in seeds for p in generate(s, per_seed)]
    llm = LLM(None, runner="v2", device="cpu", max_num_seqs=64, max_num_batched_tokens=4096)
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens,
                                                stop=list(STOP)))
    return [(list(o.prompt_token_ids), list(o.token_ids)) for o in outs]


def training_seeds(n: int) -> tuple[int, ...]:
    """The first n training seeds; a held-out seed here would leak the evaluation set."""
    seeds = TRAIN_SEEDS[:n]
    leak = set(seeds) & set(HELD_OUT_SEEDS)
    if leak:
        raise ValueError(f"held-out seeds {sorted(leak)[:3]} cannot train the head")
    return seeds


def evaluation_seeds(n: int) -> tuple[int, ...]:
    seeds = HELD_OUT_SEEDS[:n]
    for s in seeds:
        check_split(s)                    # refuses a training seed
    return seeds


def training_sequences(seeds: tuple[int, ...], per_seed: int) -> list[list[int]]:
    """Problems in the format the bundled model was trained on (BOS, prompt, answer, EOS).
    Only the inputs come from here: the head's labels are the target's own predictions on
    them (`features`), so it learns what the target says, right or wrong."""
    from mrbench.runner_impl.model.char_tokenizer import BOS, EOS, char_vocab
    vocab = char_vocab(128)
    unk = vocab["<unk>"]

    def enc(text: str) -> list[int]:
        return [vocab.get(c, unk) for c in text]
    return [[vocab[BOS]] + enc(PROMPT.format(question=p.question)) + enc(" " + p.answer)
            + [vocab[EOS]] for s in seeds for p in generate(s, per_seed)]


@torch.no_grad()
def features(target, seqs: list[list[int]], batch: int = 64
             ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per sequence: the target's final (post-norm) hidden state per position (float16)
    and its greedy prediction of the next token there (what a draft must match)."""
    feats, preds = [], []
    lm_head = target.get_output_embeddings()
    for i in range(0, len(seqs), batch):
        rows = seqs[i:i + batch]
        L = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), L, dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, :len(r)] = torch.tensor(r)         # right padding: causal, never read
        h = target.model(ids).last_hidden_state
        p = lm_head(h).argmax(-1)
        for b, r in enumerate(rows):
            feats.append(h[b, :len(r)].to(torch.float16))
            preds.append(p[b, :len(r)])
    return feats, preds


# ---- training ----------------------------------------------------------------------------
def _batch(seqs, feats, preds, rows, noise: float, gen: torch.Generator):
    L = max(len(seqs[r]) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    tgt = torch.zeros(len(rows), L, dtype=torch.long)
    hid = torch.zeros(len(rows), L, feats[rows[0]].shape[1])
    mask = torch.zeros(len(rows), L, dtype=torch.bool)
    for b, r in enumerate(rows):
        n = len(seqs[r])
        ids[b, :n] = torch.tensor(seqs[r])
        tgt[b, :n] = preds[r]
        hid[b, :n] = feats[r].float()
        mask[b, :n] = True
    hin = hid[:, :-1] + noise * torch.randn(hid[:, :-1].shape, generator=gen)
    return ids, tgt, hid, hin, mask


def train(cfg: dict, out: Path, time_budget_s: float | None) -> dict:
    t0 = time.time()
    torch.manual_seed(cfg["seed"])
    target = load_target(default_model_dir())
    for p in target.parameters():
        p.requires_grad_(False)
    d, t = cfg["data"], cfg["train"]
    seqs = training_sequences(training_seeds(d["seeds"]), d["per_seed"])
    data_s = time.time() - t0
    feats, preds = features(target, seqs)
    feat_s = time.time() - t0 - data_s
    head = EagleHead(head_config(target.config))
    opt = torch.optim.AdamW(head.parameters(), lr=t["lr"], betas=(0.9, 0.95),
                            weight_decay=t["weight_decay"])
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    rng, gen = random.Random(cfg["seed"]), torch.Generator().manual_seed(cfg["seed"])
    steps, log = t["steps"], []
    t1 = time.time()
    for step in range(10**9):
        if step == 20 and time_budget_s is not None:       # fit the steps to the budget
            per = (time.time() - t1) / 20
            steps = max(21, min(steps, 20 + int((time_budget_s - (time.time() - t1)) / per)))
        if step >= steps:
            break
        lr = t["min_lr"] + 0.5 * (t["lr"] - t["min_lr"]) * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        rows = rng.sample(range(len(seqs)), t["batch_size"])
        ids, tgt, hid, hin, mask = _batch(seqs, feats, preds, rows, t["feature_noise"], gen)
        f = head(embed(ids[:, 1:]), hin)                       # position i: x[i+1], h[i]
        m = mask[:, 1:]                                        # h[i+1] exists
        reg = F.smooth_l1_loss(f[m], hid[:, 1:][m])
        logits = lm_head(f)                                    # the token after x[i+1]:
        cls = F.cross_entropy(logits[m], tgt[:, 1:][m])        # what the target predicts
        loss = t["w_reg"] * reg + t["w_cls"] * cls
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), t["grad_clip"])
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            acc = (logits[m].argmax(-1) == tgt[:, 1:][m]).float().mean()
            log.append(dict(step=step, loss=float(loss.detach()), reg=float(reg.detach()), cls=float(cls.detach()),
                            top1=float(acc), s=round(time.time() - t0, 1)))
            print(json.dumps(log[-1]), flush=True)
    save(head, target.config, out, cfg["save_dtype"])
    return dict(steps=steps, train_sequences=len(seqs), data_s=round(data_s, 1),
                features_s=round(feat_s, 1), train_s=round(time.time() - t1, 1),
                total_s=round(time.time() - t0, 1), log=log,
                params=sum(p.numel() for p in head.parameters()))


def save(head: EagleHead, target_config, out: Path, dtype: str) -> None:
    """config.json (the target's, one layer: vLLM reads it as EagleLlamaForCausalLM) and
    model.safetensors with vLLM's names (no embed_tokens, no lm_head: shared)."""
    from safetensors.torch import save_file
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(getattr(torch, dtype)).contiguous()
          for k, v in head.state_dict().items() if not k.startswith("rotary")}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    write_config(default_model_dir(), out, dtype)


def write_config(target_dir: Path, out: Path, dtype: str) -> None:
    """The target's own config.json with one layer (no paths or defaults added)."""
    cfg = json.loads((target_dir / "config.json").read_text())
    cfg.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"], dtype=dtype)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_head(head_dir: Path, target_config) -> EagleHead:
    from safetensors.torch import load_file
    head = EagleHead(head_config(target_config))
    sd = {k: v.float() for k, v in load_file(str(head_dir / "model.safetensors")).items()}
    missing, unexpected = head.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.startswith("rotary")]
    if missing or unexpected:
        raise ValueError(f"{head_dir}: missing {missing}, unexpected {unexpected}")
    return head.eval()


# ---- evaluation: greedy chain drafting, as vLLM's EAGLE proposer does ---------------------
@torch.no_grad()
def acceptance(head: EagleHead, target, pairs: list[tuple[list[int], list[int]]], k: int
               ) -> dict:
    """Per verify step with k drafts left to check: the target emits its next greedy token
    t = g[c]; the head drafts d1..dk from the sequence so far + t (d1 from the target's
    hidden states, d2.. from its own output); the longest prefix equal to g[c+1..] is
    accepted, and the cursor moves past t and the accepted drafts."""
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    steps = accepted = 0
    per_pos = [0] * k
    for prompt, g in pairs:
        seq = prompt + g
        hidden = target.model(torch.tensor([seq])).last_hidden_state      # [1, L, h]
        c = 0
        while c + k < len(g):
            j = len(prompt) + c - 1          # target hidden h[j] predicted t = seq[j+1]
            toks = torch.tensor([seq[1:j + 2]])                # x[i+1] for i = 0..j
            hin = hidden[:, :j + 1]
            drafts = []
            for _ in range(k):
                f = head(embed(toks), hin)
                d = int(lm_head(f[:, -1]).argmax(-1))
                drafts.append(d)
                toks = torch.cat([toks, torch.tensor([[d]])], 1)
                hin = torch.cat([hin, f[:, -1:]], 1)
            a = 0
            while a < k and drafts[a] == g[c + 1 + a]:
                per_pos[a] += 1
                a += 1
            steps += 1
            accepted += a
            c += 1 + a
    return dict(k=k, verify_steps=steps, accepted=accepted,
                mean_acceptance_length=1 + accepted / steps if steps else None,
                acceptance_rate_per_pos=[n / steps for n in per_pos] if steps else [])


def evaluate(head_dir: Path, cfg: dict) -> dict:
    target = load_target(default_model_dir())
    head = load_head(head_dir, target.config)
    e = cfg["eval"]
    pairs = greedy_sequences(evaluation_seeds(e["seeds"]), e["per_seed"], cfg["data"]["max_tokens"])
    return dict(problems=len(pairs), seeds=[HELD_OUT_SEEDS[0], HELD_OUT_SEEDS[e["seeds"] - 1]],
                results=[acceptance(head, target, pairs, k) for k in e["ks"]])


def write_card(out: Path, cfg: dict, summary: dict) -> None:
    ev = summary["eval"]
    rows = "\n".join(
        f"| {r['k']} | {r['verify_steps']} | {r['mean_acceptance_length']:.3f} | "
        + ", ".join(f"{x:.3f}" for x in r["acceptance_rate_per_pos"]) + " |"
        for r in ev["results"])
    tr = summary.get("train") or {}
    (out / "MODEL_CARD.md").write_text(f"""# gsm8k-tiny-eagle: an EAGLE-1 draft head for gsm8k-tiny

A {tr.get('params', '?'):,}-parameter EAGLE-1 head (vLLM 0.26 `EagleLlamaForCausalLM`: `fc` over
cat(embedding, target hidden), one Llama decoder layer without its input norm, no final
norm; embedding and lm_head shared from the target) for the bundled model
`runner_impl/assets/gsm8k-tiny`. It exists so vLLM's Model Runner V2, which speculates only
with eagle / eagle3 / mtp / dflash / dspark, can run spec decode on the bundled model.

Use: `speculative_config={{"method": "eagle", "model": "<this directory>",
"num_speculative_tokens": k}}` next to `model=<gsm8k-tiny>`.

## Training
- Data: the first {cfg['data']['per_seed']} GSM8K-format problems of {cfg['data']['seeds']}
  training seeds (`mrbench.workloads.gsm8k_problems.TRAIN_SEEDS`, never held-out ones), in the
  bundled model's training format, {tr.get('train_sequences', '?')} sequences; features are
  the target's final (post-norm) hidden states, labels its own greedy predictions.
- Loss: smooth-L1 on the next feature x {cfg['train']['w_reg']} + cross-entropy through the
  frozen lm_head x {cfg['train']['w_cls']}; feature noise N(0, {cfg['train']['feature_noise']}).
- {tr.get('steps', '?')} steps of {cfg['train']['batch_size']} sequences, AdamW lr
  {cfg['train']['lr']} cosine to {cfg['train']['min_lr']}, seed {cfg['seed']};
  {tr.get('total_s', '?')} s on {summary['host']}. Saved as {cfg['save_dtype']}.

## Acceptance (greedy chain drafting against the target, CPU float32)
{ev['problems']} held-out problems (seeds {ev['seeds'][0]}..{ev['seeds'][1]}); a verify step
is counted when k target tokens remain. AL = 1 + accepted / verify steps (vLLM's mean
acceptance length).

| k | verify steps | AL | acceptance rate per position |
|---|---:|---:|---|
{rows}

On vLLM V2 (GPU, bf16) the same figures come from vLLM's own spec-decode counters:
`mrbench run` on the vllm target reports them (`mean_acceptance_length`).

## Reproduce
    python training/train_eagle_head.py --config training/eagle_head.yaml \\
        --out runner_impl/assets/gsm8k-tiny-eagle --time-budget-s {cfg['train'].get('time_budget_s', 900)}
    python training/train_eagle_head.py --eval-only --out runner_impl/assets/gsm8k-tiny-eagle
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "training" / "eagle_head.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "runner_impl" / "assets" / "gsm8k-tiny-eagle")
    ap.add_argument("--time-budget-s", type=float)
    ap.add_argument("--eval-only", action="store_true")
    a = ap.parse_args()
    cfg = yaml.safe_load(a.config.read_text())
    torch.set_num_threads(max(1, torch.get_num_threads()))
    summary_path = a.out / "training_summary.json"
    summary = json.loads(summary_path.read_text()) if a.eval_only and summary_path.is_file() \
        else {}
    if not a.eval_only:
        summary = dict(train=train(cfg, a.out, a.time_budget_s), config=cfg)
    summary.update(host=f"{platform.processor() or platform.machine()} x{torch.get_num_threads()}"
                   f" threads, torch {torch.__version__}",
                   eval=evaluate(a.out, cfg))
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    write_card(a.out, cfg, summary)
    for r in summary["eval"]["results"]:
        print(f"k={r['k']}: AL {r['mean_acceptance_length']:.3f} over {r['verify_steps']} "
              f"verify steps; per position {[round(x, 3) for x in r['acceptance_rate_per_pos']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
