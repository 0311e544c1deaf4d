"""Train exercise 13's model: a character-level llama-style model of about 400k parameters.

    .venv/bin/python -I tools/train_tiny_model.py [--steps 1500] [--seed 0] [--out PATH]

It reads the text the model learns (src/lumen_ex/exercises/13-tiny-model/data/training_text.txt, the
repository's own READMEs of exercises 1 to 4), trains with the exercise's own reference forward
(reference.model_step on an empty cache, float32, AdamW, seeded, two CPU threads: a few minutes on
two cores), then picks the prompts the hidden suite may use: openings of lines and sentences of the training text
whose greedy continuation of GENERATED characters keeps a gap of at least MIN_GAP between the two
largest logits at every step (so a correct float32 model writes the reference's text exactly).
It writes data/tiny_model.safetensors beside it, with the config, the vocabulary, the prompts
and how it was trained in the file's metadata. CI never runs it; the shipped file is its output.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import time
from pathlib import Path

import torch

FOLDER = Path(__file__).resolve().parent.parent / "src" / "lumen_ex" / "exercises" / "13-tiny-model"
TEXT = FOLDER / "data" / "training_text.txt"
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))     # newline and printable ASCII: 96 characters
CONFIG = {"n_layers": 2, "d_model": 128, "n_heads": 4, "n_kv_heads": 2, "d_head": 32, "d_ff": 352,
          "context": 128, "vocab_size": len(VOCAB), "norm_eps": 1e-5, "rope_base": 10000.0}
PROMPT_CHARS = 40          # the prompt: the first characters of a line or a sentence of the training text
GENERATED = 120            # characters the suite generates after it
MIN_GAP = 1.0              # the smallest gap between the two largest logits a prompt may have
N_PROMPTS = 24


def load(name: str, path: Path):
    """A module of the exercise folder, by path ."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def init_weights(config, generator):
    """Small normal weights (std 0.02, the output projections scaled down by depth), norms at 1."""
    D, F, V = config["d_model"], config["d_ff"], config["vocab_size"]
    H, H_kv, d = config["n_heads"], config["n_kv_heads"], config["d_head"]

    def normal(*shape, std=0.02):
        return (torch.randn(*shape, generator=generator) * std).requires_grad_(True)

    w = {"embed": normal(V, D, std=0.1)}
    out_std = 0.02 / math.sqrt(2 * config["n_layers"])
    for i in range(config["n_layers"]):
        p = f"layers.{i}."
        w[p + "attn_norm"] = torch.ones(D, requires_grad=True)
        w[p + "wq"], w[p + "wk"], w[p + "wv"] = normal(D, H * d), normal(D, H_kv * d), normal(D, H_kv * d)
        w[p + "wo"] = normal(H * d, D, std=out_std)
        w[p + "mlp_norm"] = torch.ones(D, requires_grad=True)
        w[p + "w_gate"], w[p + "w_up"] = normal(D, F), normal(D, F)
        w[p + "w_down"] = normal(F, D, std=out_std)
    w["final_norm"] = torch.ones(D, requires_grad=True)
    w["lm_head"] = normal(D, V)
    return w


def train(ref, io, text, steps, seed, batch=32, lr=3e-3):
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    data = io.encode(text, VOCAB)
    weights = init_weights(CONFIG, generator)
    opt = torch.optim.AdamW(weights.values(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    C, t0, loss_avg = CONFIG["context"], time.time(), None
    for step in range(steps):
        frac = step / max(steps - 1, 1)
        for g in opt.param_groups:                     # 50 warm-up steps, then a cosine down to lr / 10
            g["lr"] = lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        starts = torch.randint(0, len(data) - C - 1, (batch,), generator=generator)
        window = torch.stack([data[s:s + C + 1] for s in starts.tolist()])         # (batch, C + 1)
        logits, _ = ref.model_step(window[:, :-1], ref.empty_cache(CONFIG, batch), weights, CONFIG)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(VOCAB)), window[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(weights.values(), 1.0)
        opt.step()
        value = float(loss.detach())
        loss_avg = value if loss_avg is None else 0.95 * loss_avg + 0.05 * value
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss_avg:.3f}  {time.time() - t0:6.1f} s", flush=True)
    return {k: v.detach() for k, v in weights.items()}, loss_avg


def is_prose(prompt: str) -> bool:
    """A sentence, not code or a table: it starts with a capital letter, and nearly every character is a
    letter, a space or light punctuation (the feedback shows the text; prose reads best there)."""
    plain = sum(c.isalpha() or c in " ,.;:'()-" for c in prompt)
    return prompt[:1].isupper() and plain >= 0.9 * len(prompt) and "  " not in prompt


def pick_prompts(ref, io, mistakes, text, weights):
    """Openings of lines whose greedy continuation keeps every top-two gap above MIN_GAP (float64),
    and on which every known mistake (mistakes.py KNOBS) writes another text: the generation test
    then fails every one of them at every seed."""
    w64 = {k: v.to(torch.float64) for k, v in weights.items()}
    starts = [i for i in range(1, len(text) - PROMPT_CHARS) if text[i - 1] == "\n" or text[i - 2:i] == ". "]
    candidates = [text[i:i + PROMPT_CHARS] for i in starts if is_prose(text[i:i + PROMPT_CHARS])]
    chosen, tried = [], 0
    for prompt in candidates:      # the openings of lines and of sentences, in the text's order
        tried += 1
        tokens = io.encode(prompt, VOCAB)[None]
        right, gap = ref.generate(ref.model_step, tokens, GENERATED, w64, CONFIG)
        if gap < MIN_GAP or prompt in chosen:
            continue
        if all(not torch.equal(ref.generate(mistakes.knobbed(knobs), tokens, GENERATED, w64, CONFIG)[0], right)
               for *_, knobs in mistakes.KNOBS):
            chosen.append(prompt)
        if len(chosen) == N_PROMPTS:
            break
    print(f"prompts: {len(chosen)} of {tried} tried keep a gap of {MIN_GAP} or more and tell every known mistake")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=FOLDER / "data" / "tiny_model.safetensors")
    parser.add_argument("--repick", action="store_true",
                        help="keep the weights in --out (trained with --steps and --seed) and pick the prompts again")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)   # the embedding's backward adds up in a fixed order: same seed, same bytes
    ref = load("tiny_reference", FOLDER / "reference.py")
    io = load("tiny_model_file", FOLDER / "suite" / "model_file.py")
    mistakes = load("tiny_mistakes", FOLDER / "mistakes.py")          # (it imports lumen_ex.author)
    text = TEXT.read_text()
    assert set(text) <= set(VOCAB), "the training text must use only the vocabulary's characters"
    if args.repick:
        weights, metadata = io.load_safetensors(args.out)
        loss = json.loads(metadata["trained"])["final_loss"]
    else:
        weights, loss = train(ref, io, text, args.steps, args.seed)
    prompts = pick_prompts(ref, io, mistakes, text, weights)
    metadata = {"config": json.dumps(CONFIG), "vocab": VOCAB, "prompts": json.dumps(prompts),
                "trained": json.dumps({"script": "tools/train_tiny_model.py", "steps": args.steps, "seed": args.seed,
                                       "final_loss": round(loss, 4), "text": TEXT.name,
                                       "text_sha256": hashlib.sha256(text.encode()).hexdigest()})}
    io.save_safetensors(args.out, {k: v.contiguous() for k, v in weights.items()}, metadata)
    n = sum(v.numel() for v in weights.values())
    print(f"wrote {args.out.name}: {n} parameters, {args.out.stat().st_size} bytes, loss {loss:.3f}")


if __name__ == "__main__":
    main()
