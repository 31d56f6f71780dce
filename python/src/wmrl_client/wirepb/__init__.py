"""Protobuf classes of the topics' records, generated from schemas/wmrl/v1 by `make schemas`.

The checked-in ``*_pb2`` modules are protoc's output; do not edit them (``make schemas-check``
fails when they differ from the schemas). They need the ``protobuf`` package at run time.
"""
