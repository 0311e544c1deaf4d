"""Exercise 13: one decoding step of a small language model. Read README.md in this folder first.

Bring in your own code: rope() from exercise 4 (04-rope/rope.py) and the cached, grouped-query
attention of exercise 2 (02-kv-cache/kv_cache.py). Copy them into this file: the grader runs this
file alone.
"""

import math

import torch
import torch.nn.functional as F


def model_step(tokens, cache, weights, config):
    """Run the model on L new tokens after the T tokens already in the cache.

    tokens:  (B, L) int64, the new tokens (character ids: README.md has the vocabulary).
    cache:   a list of config["n_layers"] pairs (k_cache, v_cache), each (B, n_kv_heads, T, d_head);
             T = 0 before the first step. Never modify these tensors: return new ones.
    weights: a dict of tensors by name (README.md lists them); every projection is x @ W.
    config:  a dict of the model's sizes: n_layers, d_model, n_heads, n_kv_heads, d_head, d_ff,
             vocab_size, norm_eps, rope_base.
    Returns (logits, cache): logits (B, L, vocab_size), the scores of the token after each new one,
    and the cache grown to T + L tokens per layer.
    """
    # TODO: x = the embeddings of the tokens, (B, L, d_model).
    # TODO: for each layer: x = x + attention(rms_norm(x)), with RoPE at positions T .. T+L-1 and
    #       the layer's cache grown before attending; then x = x + swiglu_mlp(rms_norm(x)).
    # TODO: the final rms_norm, then x @ weights["lm_head"].
    raise NotImplementedError("model_step is not written yet")
