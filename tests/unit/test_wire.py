"""The pipe format: round trips, and rejection of everything a hostile worker could send."""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch

from lumen_ex.sandbox.inside import wire
from lumen_ex.sandbox.inside.wire import FrameParser, ProtocolError


def frame_of(header: dict, body: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return struct.pack(">I", len(head)) + head + body


def parse_all(data: bytes, chunk: int = 7):
    """Feed ``data`` in small chunks, as a pipe would deliver it."""
    parser, frames = FrameParser(), []
    for i in range(0, len(data), chunk):
        parser.feed(data[i : i + chunk])
        while (frame := parser.next_frame()) is not None:
            frames.append(frame)
    return frames


@pytest.mark.parametrize("dtype", list(wire.DTYPES.values()), ids=list(wire.DTYPES))
def test_round_trip_every_dtype(dtype):
    t = (torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) % 3).to(dtype)
    ((header, tensors),) = parse_all(wire.encode_frame({"id": 3}, [t]))
    assert header["id"] == 3
    assert tensors[0].dtype == dtype and tensors[0].shape == t.shape
    assert torch.equal(tensors[0], t)


def test_round_trip_value_tree_with_non_contiguous_and_empty_tensors():
    a = torch.randn(3, 4).t()                       # non-contiguous
    b = torch.empty(2, 0, 5)                        # no elements
    tree, tensors = wire.pack((a, [b, None, 1.5, float("nan"), "x", True, 7], torch.device("cpu")))
    ((header, got),) = parse_all(wire.encode_frame({"v": tree}, tensors))
    value = wire.unpack(header["v"], got)
    assert isinstance(value, tuple) and torch.equal(value[0], a) and value[0].is_contiguous()
    assert value[1][0].shape == (2, 0, 5)
    assert value[1][1] is None and value[1][2] == 1.5 and value[1][3] != value[1][3]
    assert value[1][4:] == ["x", True, 7] and value[2] == torch.device("cpu")


def test_rebuilt_tensors_are_plain_and_do_not_alias():
    class Sneaky(torch.Tensor):
        def __eq__(self, other):
            return True

    t = torch.zeros(3).as_subclass(Sneaky)
    ((_, (got,)),) = parse_all(wire.encode_frame({}, [t]))
    assert type(got) is torch.Tensor
    got += 1
    assert float(t.as_subclass(torch.Tensor).sum()) == 0.0


def test_unsendable_values_are_described_by_type_only():
    tree, tensors = wire.pack({"a": 1})
    assert tree == {"$object": "builtins.dict"} and tensors == []
    assert repr(wire.unpack(tree, [])) == "<builtins.dict>"


def test_a_request_carries_a_dict_of_tensors_and_a_reply_cannot():
    """The harness may send a dict with string keys (exercise 13's weights and config); the worker
    reads it only from a request: a reply's ``pack`` still describes a dict by its type, and a
    ``$dict`` in a reply is a protocol error."""
    weights = {"embed": torch.randn(4, 3), "layers.0.wq": torch.randn(3, 3).t(), "n": 2, "eps": 1e-5}
    tree, tensors = wire.pack((torch.zeros(1, 2), weights), dicts=True)
    ((header, got),) = parse_all(wire.encode_frame({"v": tree}, tensors))
    value = wire.unpack(header["v"], got, dicts=True)
    assert list(value[1]) == list(weights) and value[1]["n"] == 2 and value[1]["eps"] == 1e-5
    assert torch.equal(value[1]["layers.0.wq"], weights["layers.0.wq"])
    with pytest.raises(ProtocolError, match="reply cannot carry"):
        wire.unpack(header["v"], got)
    too_many = {"$dict": {f"k{i}": i for i in range(wire.MAX_TENSORS + 1)}}
    long_key = {"$dict": {"k" * (wire.MAX_PARAM_NAME + 1): 1}}
    for bad in (too_many, long_key, {"$dict": [1, 2]}):
        with pytest.raises(ProtocolError):
            wire.unpack(bad, [], dicts=True)
    # A dict the harness could not send as one (a key that is no string) is described, not sent.
    assert wire.pack({1: torch.zeros(1)}, dicts=True)[0] == {"$object": "builtins.dict"}


def test_a_held_value_is_sent_once_then_named_and_each_call_gets_its_own_copy():
    """A request names a Held value (``{"$held": key}``) instead of carrying it; the worker keeps what
    it was sent once (held.py) and gives every call a fresh copy, so a call that writes into its
    argument changes nothing the next call sees. A reply cannot name one, and the store is bounded."""
    from lumen_ex.sandbox.inside import held

    weights = wire.Held({"w": torch.arange(6.0).reshape(2, 3)})
    found: list = []
    tree, tensors = wire.pack((torch.zeros(1), weights), dicts=True, helds=found)
    assert found == [weights] and tree == {"$tuple": [{"$tensor": 0}, {"$held": weights.key}]} and len(tensors) == 1
    assert wire.pack(weights, dicts=True)[0] == {"$object": "lumen_ex.sandbox.inside.held.Held"}   # not asked for
    with pytest.raises(ProtocolError, match="only a request"):
        wire.unpack(tree, tensors, dicts=True)                       # a reply, or a worker without a resolver
    sent, sent_tensors = wire.pack(weights.value, dicts=True)
    ((header, got),) = parse_all(wire.encode_frame({"value": sent}, sent_tensors))
    held.hold(weights.key, wire.unpack(header["value"], got, dicts=True))
    fresh = held.resolver("cpu")
    first = wire.unpack(tree, tensors, dicts=True, held=fresh)[1]
    first["w"].mul_(0)                                               # the learner's call writes into it
    second = wire.unpack(tree, tensors, dicts=True, held=fresh)[1]
    assert torch.equal(second["w"], torch.arange(6.0).reshape(2, 3))
    with pytest.raises(KeyError):
        wire.unpack({"$held": "held-unknown"}, [], dicts=True, held=fresh)
    saved = dict(held.store)
    held.store.clear()
    try:
        for i in range(held.MAX_HELD):
            held.hold(f"k{i}", i)
        held.hold("k0", 5)                                           # a key sent again replaces its value
        with pytest.raises(ValueError, match="at most"):
            held.hold("one-more", 0)
        with pytest.raises(ValueError, match="short string"):
            held.hold("k" * (held.MAX_KEY + 1), 0)
    finally:
        held.store.clear()
        held.store.update(saved)


def test_several_frames_in_one_stream():
    data = b"".join(wire.encode_frame({"id": i}, [torch.full((i + 1,), float(i))]) for i in range(5))
    frames = parse_all(data, chunk=3)
    assert [h["id"] for h, _ in frames] == list(range(5))
    assert [t[0].tolist() for _, t in frames] == [[float(i)] * (i + 1) for i in range(5)]


@pytest.mark.parametrize(
    "header,body,why",
    [
        ({"tensors": [{"dtype": "load", "shape": [1], "nbytes": 4}]}, b"\0" * 4, "dtype"),
        ({"tensors": [{"dtype": "float32", "shape": [-1], "nbytes": 4}]}, b"\0" * 4, "shape"),
        ({"tensors": [{"dtype": "float32", "shape": [2.0], "nbytes": 8}]}, b"\0" * 8, "shape"),
        ({"tensors": [{"dtype": "float32", "shape": [3], "nbytes": 4}]}, b"\0" * 4, "byte count"),
        ({"tensors": [{"dtype": "float32", "shape": [1] * 9, "nbytes": 4}]}, b"\0" * 4, "shape"),
        ({"tensors": [{"dtype": "float64", "shape": [10**8], "nbytes": 8 * 10**8}]}, b"", "cap"),
        ({"tensors": [{"dtype": "bool", "shape": [2], "nbytes": 2}]}, b"\x00\x07", "bool"),
        ({"tensors": "nope"}, b"", "list"),
        ({"tensors": [{"dtype": "float32", "shape": [1], "nbytes": 4}] * 65}, b"", "list"),
        ({"tensors": [["float32", [1], 4]]}, b"", "not an object"),
    ],
)
def test_hostile_headers_are_rejected(header, body, why):
    with pytest.raises(ProtocolError, match=why):
        parse_all(frame_of(header, body))


def test_header_length_is_capped_before_reading():
    parser = FrameParser()
    parser.feed(struct.pack(">I", 100 * 1024 * 1024))
    with pytest.raises(ProtocolError, match="header length"):
        parser.next_frame()
    assert parser.buffered <= 4   # nothing beyond the length prefix was buffered


def test_oversized_tensor_is_rejected_before_its_bytes_arrive():
    parser = FrameParser()
    parser.feed(frame_of({"tensors": [{"dtype": "uint8", "shape": [300 * 1024 * 1024], "nbytes": 300 * 1024 * 1024}]}))
    with pytest.raises(ProtocolError, match="cap"):
        parser.next_frame()


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"[1, 2]", b"{" * 5000 + b"}" * 5000, b"not json"])
def test_garbage_headers_are_rejected(raw):
    with pytest.raises(ProtocolError):
        parse_all(struct.pack(">I", len(raw)) + raw)


@pytest.mark.parametrize(
    "tree",
    [{"$tensor": 5}, {"$tensor": "0"}, {"$tuple": "x"}, {"$float": "1e999"}, {"weird": 1}, [1, 2],
     {"$list": [{"$list": [{"$list": [{"$list": [{"$list": [{"$list": [{"$list": [{"$list": [{"$list": [
         {"$list": [{"$list": [{"$list": [{"$list": [1]}]}]}]}]}]}]}]}]}]}]}]}]}],
    ids=["range", "type", "tuple", "float", "unknown", "bare-list", "too-deep"],
)
def test_bad_value_trees_are_rejected(tree):
    with pytest.raises(ProtocolError):
        wire.unpack(tree, [torch.zeros(1)])


def test_frames_never_unpickle():
    """A pickle payload in place of a header is just invalid JSON."""
    import pickle

    payload = pickle.dumps({"tensors": []})
    with pytest.raises(ProtocolError):
        parse_all(struct.pack(">I", len(payload)) + payload)


def test_a_workers_request_and_reply_pipes_hold_a_megabyte():
    """A 1.6 MB request (exercise 13's weights, exercise 5's inputs) crosses in two writes, not in
    sixteen 64 KB rounds (src/lumen_ex/sandbox/base.py PIPE_BYTES); the output pipe keeps its size."""
    import fcntl

    from lumen_ex.sandbox.base import PIPE_BYTES, WorkerPipes

    pipes = WorkerPipes()
    try:
        size = lambda fd: fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032))   # noqa: E731
        max_size = int(open("/proc/sys/fs/pipe-max-size").read())
        assert size(pipes.req_w) == size(pipes.rep_w) == min(PIPE_BYTES, max_size) or os.geteuid() != 0
        assert size(pipes.out_w) < PIPE_BYTES
    finally:
        pipes.close()
