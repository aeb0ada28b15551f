"""Our V2 messages are wire-compatible with the protocol: every field we declare has the number,
type and cardinality of the same field in the descriptors tritonclient ships (Triton's
`grpc_service.proto`, a superset of KServe's `grpc_predict_v2.proto`)."""

from __future__ import annotations

from typing import Any

import pytest
import tritonclient.grpc.service_pb2 as triton
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor

from shared.adapters.oip import grpc_predict_v2_pb2 as ours
from shared.adapters.oip.grpc_server import SERVICE


def fields(message: Descriptor) -> dict[str, tuple[int, int, bool, str]]:
    """name -> (number, type, repeated, nested type's short name), nested messages included."""
    found = {}
    for f in message.fields:
        nested = f.message_type.name if f.message_type is not None else ""
        found[f.name] = (f.number, f.type, f.is_repeated, nested)
    for nested_type in message.nested_types:
        for name, shape in fields(nested_type).items():
            found[f"{nested_type.name}.{name}"] = shape
    return found


def incompatible(mine: Descriptor, theirs: Descriptor) -> list[str]:
    """Fields of `mine` that `theirs` lacks or declares otherwise."""
    reference = fields(theirs)
    return [f"{mine.name}.{name}" for name, shape in fields(mine).items() if reference.get(name) != shape]


MESSAGES = sorted(ours.DESCRIPTOR.message_types_by_name)


@pytest.mark.parametrize("name", MESSAGES)
def test_every_message_matches_the_protocol(name: str) -> None:
    assert (
        incompatible(ours.DESCRIPTOR.message_types_by_name[name], triton.DESCRIPTOR.message_types_by_name[name]) == []
    )


def test_the_service_and_its_methods_are_the_protocols() -> None:
    service = ours.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    theirs = triton.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert theirs.full_name == SERVICE
    for method in service.methods:
        reference = theirs.methods_by_name[method.name]
        assert (method.input_type.name, method.output_type.name) == (
            reference.input_type.name,
            reference.output_type.name,
        )


def _mutated(edit: Any) -> Descriptor:
    """Our file with one field changed, in a pool of its own."""
    from google.protobuf import descriptor_pool

    proto = descriptor_pb2.FileDescriptorProto()
    ours.DESCRIPTOR.CopyToProto(proto)
    edit(proto)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return pool.FindMessageTypeByName("oip_v2.ModelInferRequest")


def test_the_check_catches_a_renumbered_or_retyped_field() -> None:
    """Mutations: raw_input_contents renumbered; a tensor's shape made int32."""

    def renumber(proto: descriptor_pb2.FileDescriptorProto) -> None:
        request = next(m for m in proto.message_type if m.name == "ModelInferRequest")
        next(f for f in request.field if f.name == "raw_input_contents").number = 8

    def retype(proto: descriptor_pb2.FileDescriptorProto) -> None:
        request = next(m for m in proto.message_type if m.name == "ModelInferRequest")
        tensor = next(m for m in request.nested_type if m.name == "InferInputTensor")
        next(f for f in tensor.field if f.name == "shape").type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32

    reference = triton.DESCRIPTOR.message_types_by_name["ModelInferRequest"]
    assert incompatible(_mutated(renumber), reference) == ["ModelInferRequest.raw_input_contents"]
    assert incompatible(_mutated(retype), reference) == ["ModelInferRequest.InferInputTensor.shape"]
