"""``--help`` examples of the commands whose parsers ``glow_core.cli`` builds inline; commands
in their own module (bench, cache) carry their own."""

from __future__ import annotations

import argparse

EXAMPLES = {
    "backends": """\
examples:
  glow backends        # name, version, distribution, primitives, status; the compile cache's location
Exit status 1 when a plugin failed to load (its error is in the table).
""",
    "run": """\
examples:
  glow run zoo:small_cnn --check                      # random inputs, compared with onnxruntime
  glow run model.onnx --shape input=1,3,224,224        # give symbolic input dimensions
  glow run model.onnx --input input=x.npy --save out.npz
  glow run zoo:resnet50 --backend cpu --option threads=4 --profile
  glow run zoo:resnet50 --backend opencl,cpu --trace trace.json
  glow run zoo:small_cnn --quantize profile.json --schema symmetric --per-channel
  glow run zoo:small_cnn --precision fp16
""",
    "dump": """\
examples:
  glow dump zoo:small_cnn --stage lowered             # graph|optimized|lowered|ir|memory
  glow dump zoo:small_cnn --stage ir --format dot | dot -Tsvg > ir.svg
  glow dump zoo:small_cnn --stage memory --format svg > memory.svg
  glow dump --list-steps                               # every pipeline step, in order
  glow dump zoo:small_cnn --after fuse-activations     # the graph right after one step
  glow dump zoo:bert_mini --backend interpreter --stage ir --keep LayerNorm,Gelu,Attention
""",
    "profile": """\
examples:
  glow profile zoo:small_cnn --random 16 -o profile.json    # ranges over 16 seeded batches
  glow run zoo:small_cnn --quantize profile.json --check
""",
    "bundle": """\
examples:
  glow bundle zoo:small_cnn --backend cpu -o out/            # out/small_cnn.{o,h,json,weights.bin}
  glow bundle zoo:resnet50 --backend cpu -o out/ --weights embedded --shared
""",
    "report": """\
examples:
  glow report zoo:resnet50                            # node counts, memory plan, stage times
  glow report zoo:resnet50 --json | head
""",
    "demo": """\
examples:
  glow demo                    # the best installed backend
  glow demo --backend interpreter
""",
}


def add_examples(sub: argparse._SubParsersAction) -> None:
    """Give each listed subcommand its examples under ``--help``."""
    for name, parser in sub.choices.items():
        if name in EXAMPLES and not parser.epilog:
            parser.epilog = EXAMPLES[name]
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
