"""A stream that notes how a failed Avro read went wrong, for the decoder's error path.

Its own module so it stays interpreted when the decoder is compiled (setup.py): compiled with
it, the probe raised BufferError ("existing exports of data") instead of noting the short read.
"""

from __future__ import annotations

import io


class ReadProbe(io.BytesIO):
    """Records the first read that asked for a negative length or got fewer bytes than asked."""

    anomaly: str | None = None

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if self.anomaly is None:
            if size is None or size < 0:
                self.anomaly = "negative length"
            elif len(data) < size:
                self.anomaly = "short"
        return data
