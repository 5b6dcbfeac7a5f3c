"""The runs table's reads for the guarding batch (streams/worker/tables.py), on a real Faust
table with its memory store (no broker is contacted)."""

from __future__ import annotations

import faust
from faust.sensors import Sensor

from streams.worker.tables import RunsTable, stored_values


class CountedReads(Sensor):
    """Counts the table reads Faust reports to its sensors."""

    reads = 0

    def on_table_get(self, table, key) -> None:  # noqa: ANN001 - Faust's signature
        self.reads += 1


def runs_table() -> tuple[RunsTable, CountedReads]:
    app = faust.App("lg-unit", broker="kafka://127.0.0.1:9", store="memory://")
    sensor = CountedReads()
    app.sensors.add(sensor)
    table = RunsTable(app, name="runs", default=None, key_type=bytes)
    return table, sensor


def test_a_stored_value_reads_as_fausts_get_reads_it_and_a_missing_key_as_none() -> None:
    table, _ = runs_table()
    table.data[b"run-1"] = "state of run-1"  # as the guarding agent stores a state
    read = stored_values(table)
    assert read(b"run-1") == table.get(b"run-1") == "state of run-1"
    assert read(b"run-2") is None
    assert table.get(b"run-2") is None


def test_the_batch_reads_skip_fausts_per_read_sensors() -> None:
    table, sensor = runs_table()
    table.data[b"run-1"] = "state"
    table.get(b"run-1")
    assert sensor.reads == 1  # Faust's read reports itself (what the batch's reads save)
    read = stored_values(table)
    read(b"run-1")
    read(b"run-2")
    assert sensor.reads == 1


def test_a_read_follows_what_the_table_holds_now() -> None:
    table, _ = runs_table()
    read = stored_values(table)
    table.data[b"run-1"] = "first"
    assert read(b"run-1") == "first"
    table.data[b"run-1"] = "second"
    del table.data[b"run-1"]
    assert read(b"run-1") is None
