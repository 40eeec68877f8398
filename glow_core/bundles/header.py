"""The C header of a bundle, generated from its manifest (never from the model again).

For each entry point the header declares the function and states every fact a C program
needs twice over: as macros (``SMALL_CNN_INPUT0_OFFSET``, ``SMALL_CNN_IN_INPUT_OFFSET``),
usable in constant expressions and ``#if``, and as a ``static const`` table of structs
(``NAME_models``) that a generic program walks (examples/bundle/run_bundle.c does).
"""

from __future__ import annotations

import re

from glow_core.bundles.manifest import EntryPoint, Manifest, TensorSlot
from glow_core.errors import BundleError
from glow_core.types import ElemKind

_TYPES = """\
#ifndef GLOW_BUNDLE_TYPES
#define GLOW_BUNDLE_TYPES
/* The tables below are static: a program that reads none of them gets no warning. */
#if defined(__GNUC__) || defined(__clang__)
#define GLOW_BUNDLE_TABLE static const __attribute__((unused))
#else
#define GLOW_BUNDLE_TABLE static const
#endif

/* Element kinds of inputs and outputs (glow's ElemKind, in its declaration order). */
enum glow_bundle_elem {{
{elems}
}};

/* One input or output: where it lives in the mutable region, and what it holds. */
typedef struct {{
  const char *name;
  enum glow_bundle_elem elem;
  uint32_t elem_size;     /* bytes per element */
  uint32_t rank;
  const uint64_t *shape;  /* rank dimensions (NULL for a scalar) */
  uint64_t offset;        /* bytes from the start of the mutable region */
  uint64_t size;          /* bytes */
}} glow_bundle_tensor;

typedef void (*glow_bundle_entry)(const uint8_t *constants, uint8_t *mutable_weights,
                                  uint8_t *activations);

/* One entry point (one model) of a bundle. */
typedef struct {{
  const char *name;
  glow_bundle_entry run;
  void (*shutdown)(void);     /* stops its worker threads; NULL when it runs on one */
  uint64_t constant_offset;   /* where its constants start in the weights */
  uint64_t constant_size;
  uint64_t mutable_size;      /* inputs and outputs */
  uint64_t activations_size;  /* scratch */
  uint32_t input_count;
  uint32_t output_count;
  const glow_bundle_tensor *inputs;
  const glow_bundle_tensor *outputs;
}} glow_bundle_model;

/* A whole bundle: NAME_bundle. */
typedef struct {{
  const char *name;
  uint64_t alignment;         /* of every region */
  uint64_t weights_size;
  const uint8_t *weights;     /* embedded weights; NULL when they are in weights_file */
  const char *weights_file;   /* NULL when embedded */
  uint32_t model_count;
  const glow_bundle_model *models;
}} glow_bundle_info;
#endif /* GLOW_BUNDLE_TYPES */
"""


def elem_enum(kind: ElemKind) -> str:
    """The C enumerator of an element kind: ``GLOW_ELEM_FLOAT32``."""
    return f"GLOW_ELEM_{kind.name.upper()}"


def _macro(name: str) -> str:
    """An upper-case macro stem for a C name (entry names are identifiers already)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def render_header(manifest: Manifest) -> str:
    """The whole ``NAME.h`` for ``manifest``."""
    check_names(manifest.name, list(manifest.entries))
    stem = _macro(manifest.name)
    libraries = " ".join(f"-l{lib}" for lib in manifest.libraries)
    elems = ",\n".join(f"  {elem_enum(k)} = {i}" for i, k in enumerate(ElemKind))
    lines = [
        f"/* {manifest.name}.h: glow AOT bundle {manifest.name!r} (glow {manifest.glow_version}, "
        f"backend {manifest.backend}, {manifest.triple}, cpu {manifest.cpu}).",
        f" * Generated from {manifest.name}.json; do not edit. Link {manifest.name}.o"
        + (f" with {libraries}." if libraries else "."),
        " *",
        " * Each entry point runs one model on three regions, each aligned to",
        f" * {stem}_ALIGNMENT bytes:",
        " *   constants        the weights + ENTRY_CONSTANT_OFFSET (read only, shared by calls)",
        " *   mutable_weights  ENTRY_MUTABLE_SIZE bytes: inputs and outputs at their offsets",
        " *   activations      ENTRY_ACTIVATIONS_SIZE bytes of scratch",
        " * Calls at once need their own mutable and activation regions (and, for an entry",
        " * with worker threads, one call at a time).",
        " */",
        f"#ifndef GLOW_BUNDLE_{stem}_H",
        f"#define GLOW_BUNDLE_{stem}_H",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        _TYPES.format(elems=elems),
        f"#define {stem}_ALIGNMENT {manifest.alignment}",
        f"#define {stem}_WEIGHTS_SIZE {manifest.weights_bytes}ULL",
        f"#define {stem}_MODEL_COUNT {len(manifest.entries)}",
    ]
    if manifest.weights == "embedded":
        lines += [
            f"#define {stem}_WEIGHTS_EMBEDDED 1",
            f"extern const uint8_t {manifest.weights_symbol}[];  /* the weights, in the object */",
        ]
    else:
        lines.append(f'#define {stem}_WEIGHTS_FILE "{manifest.files["weights"]}"')
    for entry in manifest.entries:
        lines += ["", *_entry_lines(entry)]
    lines += ["", f"GLOW_BUNDLE_TABLE glow_bundle_model {manifest.name}_models[] = {{"]
    lines += [f"  {_model_row(e)}," for e in manifest.entries]
    embedded = manifest.weights == "embedded"
    weights = manifest.weights_symbol if embedded else "0"
    weights_file = "0" if embedded else f'"{_c_string(manifest.files["weights"])}"'
    lines += [
        "};",
        "",
        f"GLOW_BUNDLE_TABLE glow_bundle_info {manifest.name}_bundle = {{",
        f'  "{manifest.name}", {manifest.alignment}, {manifest.weights_bytes}ULL, {weights}, {weights_file},',
        f"  {len(manifest.entries)}, {manifest.name}_models}};",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        f"#endif /* GLOW_BUNDLE_{stem}_H */",
        "",
    ]
    return "\n".join(lines)


def _entry_lines(entry: EntryPoint) -> list[str]:
    stem = _macro(entry.name)
    lines = [
        f"/* ---- entry point {entry.name} ---- */",
        f"void {entry.name}(const uint8_t *constants, uint8_t *mutable_weights, uint8_t *activations);",
    ]
    if entry.shutdown:
        lines.append(f"void {entry.shutdown}(void);  /* stops {entry.name}'s worker threads */")
    lines += [
        f"#define {stem}_CONSTANT_OFFSET {entry.constant_offset}ULL",
        f"#define {stem}_CONSTANT_SIZE {entry.constant_bytes}ULL",
        f"#define {stem}_MUTABLE_SIZE {entry.mutable_bytes}ULL",
        f"#define {stem}_ACTIVATIONS_SIZE {entry.activation_bytes}ULL",
        f"#define {stem}_THREADS {entry.threads}",
        f"#define {stem}_INPUT_COUNT {len(entry.inputs)}",
        f"#define {stem}_OUTPUT_COUNT {len(entry.outputs)}",
    ]
    for role, slots in (("input", entry.inputs), ("output", entry.outputs)):
        by_name = _unique_stems(slots)
        for index, slot in enumerate(slots):
            lines += _slot_macros(f"{stem}_{role.upper()}{index}", slot)
            if slot.name in by_name:
                short = "IN" if role == "input" else "OUT"
                lines.append(f"#define {stem}_{short}_{by_name[slot.name]}_OFFSET {slot.offset}ULL")
            if slot.shape:
                dims = ", ".join(str(d) for d in slot.shape)
                lines.append(f"GLOW_BUNDLE_TABLE uint64_t {entry.name}_{role}{index}_shape[] = {{{dims}}};")
        rows = [f"  {_slot_row(entry.name, role, i, s)}," for i, s in enumerate(slots)]
        if not rows:  # C has no empty arrays: a function without inputs gets a NULL table
            lines.append(f"#define {entry.name}_{role}s ((const glow_bundle_tensor *)0)")
            continue
        lines += [f"GLOW_BUNDLE_TABLE glow_bundle_tensor {entry.name}_{role}s[] = {{", *rows, "};"]
    return lines


def _slot_macros(prefix: str, slot: TensorSlot) -> list[str]:
    elem = ElemKind[slot.elem]
    return [
        f'#define {prefix}_NAME "{_c_string(slot.name)}"',
        f"#define {prefix}_ELEM {elem_enum(elem)}",
        f"#define {prefix}_RANK {len(slot.shape)}",
        f"#define {prefix}_OFFSET {slot.offset}ULL",
        f"#define {prefix}_SIZE {slot.nbytes}ULL",
    ]


def _slot_row(entry: str, role: str, index: int, slot: TensorSlot) -> str:
    elem = ElemKind[slot.elem]
    shape = f"{entry}_{role}{index}_shape" if slot.shape else "0"
    return (
        f'{{"{_c_string(slot.name)}", {elem_enum(elem)}, {elem.itemsize}, {len(slot.shape)}, '
        f"{shape}, {slot.offset}ULL, {slot.nbytes}ULL}}"
    )


def _model_row(entry: EntryPoint) -> str:
    return (
        f'{{"{entry.name}", {entry.name}, {entry.shutdown or "0"}, {entry.constant_offset}ULL, '
        f"{entry.constant_bytes}ULL, {entry.mutable_bytes}ULL, {entry.activation_bytes}ULL, "
        f"{len(entry.inputs)}, {len(entry.outputs)}, {entry.name}_inputs, {entry.name}_outputs}}"
    )


def _unique_stems(slots: tuple[TensorSlot, ...]) -> dict[str, str]:
    """Tensor name -> its macro stem, for names whose stem no other tensor shares (the
    others are reachable by index only, so no macro is ever defined twice)."""
    stems: dict[str, list[str]] = {}
    for slot in slots:
        stem = _macro(slot.name)
        if stem and not stem[0].isdigit():
            stems.setdefault(stem, []).append(slot.name)
    return {names[0]: stem for stem, names in stems.items() if len(names) == 1}


def _c_string(text: str) -> str:
    """``text`` as the inside of a C string literal (octal escapes for anything unusual)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\' or not 32 <= byte < 127:
            out.append(f"\\{byte:03o}")
        else:
            out.append(char)
    return "".join(out)


def check_names(bundle: str, entries: list[EntryPoint] | list[str]) -> None:
    """Refuse entry points whose macros or C symbols would clash with each other's or the
    bundle's. With bare names (before compiling, so a clash costs no compile) the symbols
    derived from an entry's tensors are not known yet; the header checks them again."""
    symbols = {f"{bundle}_{suffix}": f"bundle {bundle!r}" for suffix in ("weights", "models", "bundle")}
    stems: dict[str, str] = {}
    for entry in entries:
        name = entry if isinstance(entry, str) else entry.name
        owner = f"entry point {name!r}"
        stem = _macro(name)
        if stem in stems:
            raise BundleError(
                f"entry points {stems[stem]!r} and {name!r} would define the same macros "
                f"({stem}_...); give them names that differ in more than case"
            )
        stems[stem] = name
        own = [name, f"{name}_inputs", f"{name}_outputs", f"{name}_shutdown"]
        if not isinstance(entry, str):
            own += [f"{name}_input{i}_shape" for i in range(len(entry.inputs))]
            own += [f"{name}_output{i}_shape" for i in range(len(entry.outputs))]
        for symbol in own:
            if symbol in symbols:
                raise BundleError(
                    f"{owner} and {symbols[symbol]} both need the C symbol {symbol!r}; rename one"
                )
            symbols[symbol] = owner
