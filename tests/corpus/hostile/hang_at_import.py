# attack: sleeps for 11 days at import time, hoping every test pays the call time limit (a run far past its limit)
# category: process
import time

time.sleep(1e6)


def scaled_dot_product_attention(q, k, v, mask=None):
    raise AssertionError("never reached")


def causal_mask(L_q, L_k=None, device=None):
    raise AssertionError("never reached")
