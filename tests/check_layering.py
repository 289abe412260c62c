#!/usr/bin/env python3
"""The layering rule of dissect's source tree (DESIGN.md section 6): each folder is one layer and
includes only its own headers and those of layers below it. meson runs this at configure time
(so the build refuses an upward include) and the test suite runs it again.

Layers, lowest first (a folder may include the ones before it):
  common < kernels < comm < config < trace < report < model < zero < pp < plan < checkpoints
  < worker < coordinator
Usage: check_layering.py SRCDIR   (prints each violation; exit 1 if any)
"""
import os
import re
import sys

LAYERS = [
    ("common", ["src/common"]),
    ("kernels", ["kernels", "kernels/cpu", "kernels/cuda"]),
    ("comm", ["src/comm"]),
    ("config", ["src/config"]),
    ("trace", ["src/trace"]),
    ("report", ["src/report"]),
    ("model", ["src/model"]),
    ("zero", ["src/zero"]),
    ("pp", ["src/pp"]),
    ("plan", ["src/plan"]),
    ("checkpoints", ["checkpoints"]),
    ("worker", ["src/worker"]),
    ("coordinator", ["src/coordinator"]),
]
SOURCES = (".c", ".h", ".cc", ".cu", ".cuh")


def layer_of_dir(d):
    for i, (_, dirs) in enumerate(LAYERS):
        if d in dirs:
            return i
    return None


def resolve(root, src_dir, inc):
    """The folder (relative to root) of an include as the build's include paths find it:
    the including file's folder, then '.', 'kernels' and 'src' (meson.build's inc)."""
    for base in (src_dir, ".", "kernels", "src"):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, p)):
            return os.path.dirname(p)
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad, files = [], 0
    for _, dirs in LAYERS:
        for d in dirs:
            full = os.path.join(root, d)
            if not os.path.isdir(full):
                continue
            for name in sorted(os.listdir(full)):
                if not name.endswith(SOURCES):
                    continue
                files += 1
                me = layer_of_dir(d)
                with open(os.path.join(full, name), encoding="utf-8") as f:
                    for ln, line in enumerate(f, 1):
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m:
                            continue
                        where = resolve(root, d, m.group(1))
                        if where is None:
                            bad.append(f"{d}/{name}:{ln}: #include \"{m.group(1)}\" not found")
                            continue
                        other = layer_of_dir(where)
                        if other is None:
                            bad.append(f"{d}/{name}:{ln}: #include \"{m.group(1)}\" is in {where}, "
                                       "which is no layer")
                        elif other > me:
                            bad.append(f"{d}/{name}:{ln}: #include \"{m.group(1)}\": layer "
                                       f"'{LAYERS[me][0]}' may not include the higher layer "
                                       f"'{LAYERS[other][0]}'")
    for b in bad:
        print("layering: " + b)
    print(f"layering: {files} files, {len(bad)} upward or unresolved includes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
