"""The stores' names: `ObjectStore`'s old name `KVStore` still imports, with a warning, for one release."""

from __future__ import annotations

import warnings

import pytest


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
