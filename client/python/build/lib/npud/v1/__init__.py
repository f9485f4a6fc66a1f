"""Generated npud.v1 protobuf and gRPC modules (see tools/gen_stubs.py)."""
