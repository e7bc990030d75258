"""The generated protobuf messages and gRPC stubs of every `snug.*.v1` package.

Generated from the repository's `proto/` by grpcio-tools when this package was built (see
setup.py), never edited by hand:

    from snug_hub.pb import container_pb2, container_pb2_grpc
    stub = container_pb2_grpc.ContainerServiceStub(channel)

The clients in `snug_hub` wrap these stubs; use the stubs directly for what the clients leave
out, and `snug_hub.errors.from_rpc_error` to turn their `grpc.RpcError` into typed errors.
"""

from snug_hub._proto.snug.admin.v1 import admin_pb2, admin_pb2_grpc
from snug_hub._proto.snug.container.v1 import container_pb2, container_pb2_grpc
from snug_hub._proto.snug.materialize.v1 import materialize_pb2, materialize_pb2_grpc
from snug_hub._proto.snug.schema.v1 import schema_pb2, schema_pb2_grpc
from snug_hub._proto.snug.sync.v1 import sync_pb2, sync_pb2_grpc

__all__ = [
    "admin_pb2",
    "admin_pb2_grpc",
    "container_pb2",
    "container_pb2_grpc",
    "materialize_pb2",
    "materialize_pb2_grpc",
    "schema_pb2",
    "schema_pb2_grpc",
    "sync_pb2",
    "sync_pb2_grpc",
]
