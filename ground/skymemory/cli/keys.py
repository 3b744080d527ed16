"""`skymemory keys`: the ground's content keys over time (what chunks are sealed under: skymemory.protocol.seal).

list     the key ids in the manifest's content key file and which one seals (never the keys themselves)
rotate   a new key id: new chunks are sealed under it; chunks sealed under the old ids still open
retire   drop a key id: chunks sealed under it no longer open (their blocks are misses, recomputed)

The file is changed in place (a new file renamed over it, mode 0600); every process reading the manifest
picks the change up at its next seal or open. Another ground host of the same constellation needs the new
file too: copy it there before retiring the old id.
"""

from __future__ import annotations

import argparse

from skymemory.argtypes import int_range
from skymemory.cli._common import add_manifest_arg, load_manifest
from skymemory.protocol.seal import ContentKeys, KeyFileError


def register(subparsers) -> None:
    p = subparsers.add_parser("keys", help="the ground's content keys: list, rotate, retire",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    for name, helptext in (("list", "the key ids and which one seals"),
                           ("rotate", "seal new chunks under a new key id"),
                           ("retire", "drop a key id (what it sealed no longer opens)")):
        action = sub.add_parser(name, help=helptext)
        if name == "retire":
            action.add_argument("key_id", type=int_range(1, 0xFFFFFFFF), help="the key id to drop")
        add_manifest_arg(action)
        action.set_defaults(func=run)


def _file(args) -> str:
    path = load_manifest(args).content_key_file
    if not path:
        raise KeyFileError("the manifest names no content key file (it was written before sealing): "
                           "launch the constellation again")
    return path


def run(args) -> int:
    keys = ContentKeys.load(_file(args))
    if args.keys_command == "rotate":
        new = keys.rotate()
        keys.save()
        print(f"new chunks are sealed under key id {new}; ids {', '.join(map(str, sorted(keys.masters)))} open "
              f"({keys.path})")
    elif args.keys_command == "retire":
        keys.retire(args.key_id)
        keys.save()
        print(f"key id {args.key_id} retired: what it sealed no longer opens; ids "
              f"{', '.join(map(str, sorted(keys.masters)))} remain, {keys.current_id} seals ({keys.path})")
    else:
        for key_id in sorted(keys.masters):
            print(f"{key_id}{'  seals new chunks' if key_id == keys.current_id else ''}")
    return 0
