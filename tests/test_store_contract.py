"""The block-store contract (skymemory.store.contract): every store declares its capabilities and has them.

A store says what it can do by inheriting capability protocols; the KV layer asks for a
protocol (isinstance) and never probes a store's attributes by name. These tests check
the declarations against the code (signatures with `inspect`), that the KV layer follows
each declaration, and that `ObjectStore`'s old name `KVStore` still imports, with a warning.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import warnings
from pathlib import Path

import pytest

from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import (CAPABILITIES, BlockStore, BulkBlockReads, BulkBlockWrites, EvictionNotices,
                                      StreamedBlockReads, streams)
from skymemory.store.local import LocalBlockStore

from kv_support import FailingStore

PACKAGE = Path(__file__).resolve().parents[1] / "ground" / "skymemory"
BLOCK = b"\x07" * 32


def _store_classes() -> list[type]:
    """Every class named *Store in the ground package (found with ast), and the KV tests' store double."""
    classes = [FailingStore]
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.name.endswith("Store")]
        if names:
            module = importlib.import_module(".".join(("skymemory", *path.relative_to(PACKAGE).with_suffix("").parts)))
            classes += [getattr(module, name) for name in names if getattr(module, name) not in CAPABILITIES]
    return classes


STORES = [cls for cls in _store_classes() if any(p in cls.__mro__ for p in CAPABILITIES)]
NOT_BLOCK_STORES = {"ObjectStore": "named objects, on a ConstellationBlockStore of its own",
                    "PlacedStore": "RotatingBlockStore's async part, on its loop"}


def _declared(cls: type) -> list[type]:
    return [protocol for protocol in CAPABILITIES if protocol in cls.__mro__]


def _members(protocol: type) -> list[str]:
    """The methods and properties a protocol asks for (not the ones typing.Protocol adds, all underscored)."""
    return [name for name, value in vars(protocol).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))]


def _mismatch(impl, stub) -> str | None:
    """None when `impl` accepts every call the protocol's `stub` allows, else what it lacks."""
    if inspect.iscoroutinefunction(impl) != inspect.iscoroutinefunction(stub):
        return "async" if inspect.iscoroutinefunction(stub) else "not async"
    want = list(inspect.signature(stub).parameters.values())
    have = list(inspect.signature(impl).parameters.values())
    varargs = any(p.kind is p.VAR_POSITIONAL for p in have)
    varkw = any(p.kind is p.VAR_KEYWORD for p in have)
    positional = [p for p in have if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in have if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    used = set()
    for i, param in enumerate(want):
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            if i >= len(positional):
                if varargs:
                    continue
                return f"no positional parameter {param.name!r}"
            match = positional[i]
            if param.kind is param.POSITIONAL_OR_KEYWORD and match.name != param.name:
                return f"parameter {i} is {match.name!r}, the contract calls it {param.name!r}"
        elif param.kind is param.KEYWORD_ONLY:
            match = by_name.get(param.name)
            if match is None:
                if varkw:
                    continue
                return f"no keyword parameter {param.name!r}"
        else:
            continue
        if param.default is not param.empty and match.default is match.empty:
            return f"{param.name!r} has a default in the contract, none here"
        used.add(match.name)
    required = [p.name for p in have if p.name not in used and p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return f"needs {required}, which the contract does not pass" if required else None


@pytest.mark.parametrize("cls", STORES, ids=[cls.__name__ for cls in STORES])
def test_a_store_implements_what_it_declares(cls):
    problems = []
    for protocol in _declared(cls):
        for name in _members(protocol):
            owner = next(k for k in cls.__mro__ if name in vars(k))
            if owner in CAPABILITIES:
                problems.append(f"{protocol.__name__}.{name}: not implemented")
                continue
            impl, stub = vars(owner)[name], vars(protocol)[name]
            if isinstance(stub, property):
                if not isinstance(impl, property):
                    problems.append(f"{protocol.__name__}.{name}: a property in the contract")
                continue
            why = _mismatch(impl, stub)
            if why:
                problems.append(f"{protocol.__name__}.{name}: {why}")
    assert not problems, f"{cls.__name__}: {problems}"


def test_every_store_declares_the_contract_or_is_known_not_to_be_a_block_store():
    assert {cls.__name__ for cls in STORES} >= {"LocalBlockStore", "MemoryBlockStore", "ConstellationBlockStore",
                                                "RotatingBlockStore", "FailingStore"}
    assert [cls.__name__ for cls in STORES if BlockStore not in cls.__mro__] == []
    undeclared = {cls.__name__ for cls in _store_classes()} - {cls.__name__ for cls in STORES}
    assert undeclared == set(NOT_BLOCK_STORES)


def test_the_signature_check_finds_a_mismatch():
    def renamed(self, records, targets): ...
    def extra(self, records, buffers, strict): ...
    def fitting(self, records, buffers, *, strict=False): ...

    stub = vars(BulkBlockReads)["get_blocks_into"]
    assert "'targets'" in _mismatch(renamed, stub)
    assert "['strict']" in _mismatch(extra, stub)
    assert _mismatch(fitting, stub) is None


def test_a_declared_capability_without_its_method_cannot_be_built():
    class Declares(LocalBlockStore, BulkBlockWrites):
        pass

    with pytest.raises(TypeError, match="put_blocks"):
        Declares()


def test_streams_only_where_this_store_can_now():
    addresses = {(0, 0): ("127.0.0.1", 9)}
    with ConstellationBlockStore(addresses, [(0, 0)], fast_options={"deadline_s": 7.0}) as fast:
        assert streams(fast) and fast.stream_deadline_s == 7.0
    with ConstellationBlockStore(addresses, [(0, 0)], fast=False) as slow:
        assert isinstance(slow, StreamedBlockReads) and not streams(slow)  # declared, but no fast path here
    assert not streams(LocalBlockStore())


def test_a_stream_from_a_store_that_cannot_stream_says_so():
    from skymemory.kv.format import codec
    from skymemory.kv.transfer.landing import LandingBuffers
    from skymemory.kv.transfer.streaming import PrefixStream

    geometry = codec.BlockGeometry(layers=2, kv_heads=2, head_dim=4, tokens=16)
    record = LocalBlockStore().put_block(BLOCK, b"x")
    with pytest.raises(ValueError, match="StreamedBlockReads.*LocalBlockStore"):
        PrefixStream(LocalBlockStore(), [record], geometry, "fp16", dtype=None, device="cpu",
                     landing=LandingBuffers())


class _BulkOnly(LocalBlockStore):
    """Lands only through get_blocks_into: a get_block would be a failure here."""

    def get_block(self, record):
        raise AssertionError("get_block called on a store with BulkBlockReads")


def test_landing_takes_the_bulk_path_a_store_declares_and_get_block_otherwise():
    import torch

    from skymemory.kv.transfer.landing import land

    payloads = [bytes([i]) * 64 for i in range(3)]
    for store in (_BulkOnly(), FailingStore()):
        records = [store.put_block(bytes([i]) * 32, p) for i, p in enumerate(payloads)]
        raw = torch.zeros((3, 64), dtype=torch.uint8)
        arrival = land(store, records, raw)
        assert arrival.landed.complete == 3, type(store).__name__
        assert bytes(raw.numpy().tobytes()) == b"".join(payloads)


class _Notifying(LocalBlockStore, EvictionNotices):
    def __init__(self):
        super().__init__()
        self.listeners = []

    def subscribe_evictions(self, callback):
        self.listeners.append(callback)


class _Batching(LocalBlockStore, BulkBlockWrites):
    def __init__(self):
        super().__init__()
        self.batches = []

    def put_blocks(self, items):
        self.batches.append(len(items))
        return [self.put_block(h, p) for h, p in items]


def test_the_manager_uses_the_capabilities_a_store_declares(tmp_path):
    from skymemory.kv.hf.manager import KVCManager

    from kv_support import random_prompt, tiny

    model, tokenizer = tiny("fp32")
    notifying = _Notifying()
    manager = KVCManager(model, tokenizer, notifying, block_tokens=16, kv_dtype="fp32", index_dir=tmp_path / "a")
    assert notifying.listeners == [manager.on_block_evicted]
    batching = _Batching()
    added = KVCManager(model, tokenizer, batching, block_tokens=16, kv_dtype="fp32",
                       index_dir=tmp_path / "b").add_blocks(random_prompt(3 * 16 + 2, seed=3))
    assert added.blocks_stored == 3 and batching.batches == [3]  # one call for the prompt's blocks
    with pytest.raises(TypeError, match="BlockStore.*dict"):
        KVCManager(model, tokenizer, {}, block_tokens=16, index_dir=tmp_path / "c")


def _store_probes(path: Path, root: Path = PACKAGE) -> list[str]:
    """getattr / hasattr calls on anything named like a store, as 'file:line: code' (file relative to root)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and node.args and "store" in ast.unparse(node.args[0]).lower()):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_kv_layer_and_integrations_ask_for_protocols_never_attributes():
    sources = sorted((PACKAGE / "kv").rglob("*.py")) + sorted((PACKAGE / "integrations").rglob("*.py"))
    assert len(sources) > 20
    assert [probe for path in sources for probe in _store_probes(path)] == []


def test_the_probe_finder_finds_a_probe(tmp_path):
    (tmp_path / "x.py").write_text("put = getattr(self.store, 'put_blocks', None)\nok = getattr(config, 'x')\n")
    assert _store_probes(tmp_path / "x.py", tmp_path) == ["x.py:1: getattr(self.store, 'put_blocks', None)"]


def test_the_old_name_kvstore_still_imports_and_warns():
    from skymemory.store.objects import ObjectStore

    with pytest.warns(DeprecationWarning, match="KVStore is now ObjectStore"):
        from skymemory.store.objects import KVStore
    assert KVStore is ObjectStore
    with pytest.warns(DeprecationWarning, match="skymemory.store.KVStore is now ObjectStore"):
        from skymemory.store import KVStore as from_package
    assert from_package is ObjectStore
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from skymemory.store import ObjectStore as new_name  # the new name: no warning
    assert new_name is ObjectStore
    with pytest.raises(ImportError, match="KVStor"):
        from skymemory.store.objects import KVStor  # noqa: F401  (any other name is still an error)
