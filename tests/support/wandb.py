"""An offline W&B run file read back without W&B's reader: the logging and variant-comparison tests
check what a run logged."""
import json
import struct

from wandb.proto import wandb_internal_pb2


def wandb_history(run_file: str) -> list[dict]:
    """The `history` rows of a .wandb file: W&B's record log (LevelDB log format: 32 KiB blocks of
    checksum/length/type-framed chunks after a 7-byte file header) holding protobuf Records."""
    raw = open(run_file, "rb").read()
    assert raw[:4] == b":W&B"
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        room = block - pos % block
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7]) if room >= 7 else (0, 0, 0)
        if kind == 0:  # block padding
            pos += room
            continue
        pending += raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows
