"""The broker a benchmark runs on: the embedded tansu broker or a 3-node Apache Kafka cluster.

Both come with the same interface (``url``, ``bootstrap``, ``profile``, ``stop()``), so a
benchmark takes ``--broker tansu|kafka`` and prints figures for either, measured the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ClusterBroker:
    cluster: object
    profile = "kafka"

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        return ";".join(f"kafka://{address}" for address in self.bootstrap.split(","))

    def stop(self) -> None:
        self.cluster.stop(graceful=False)  # type: ignore[attr-defined]


def start_broker(choice: str, workdir: Path):  # -> EmbeddedBroker | ClusterBroker
    """Start the chosen broker, ready for clients; the caller stops it."""
    if choice == "kafka":
        from tests.kafka_cluster.cluster import KafkaCluster  # the tests' cluster tool

        cluster = KafkaCluster(nodes=3, base_port=0, data_dir=workdir / "kafka")
        cluster.start()
        return ClusterBroker(cluster)
    from streams.devtools.embedded_broker import EmbeddedBroker

    return EmbeddedBroker(log_path=workdir / "tansu.log").start()


def gateway_fetch_wait_ms(profile: str) -> int:
    """The gateway's control-topic fetch wait on this broker: tansu holds a fetch for the whole
    wait (its profile's 5 ms keeps decisions prompt); Kafka answers as soon as a decision
    arrives, so 20 ms (the client's default) only paces idle fetches."""
    from streams.settings import Settings

    return min(20, Settings.for_profile(profile).fetch_max_wait_ms)


def add_broker_arg(parser) -> None:  # argparse.ArgumentParser
    parser.add_argument(
        "--broker",
        choices=["tansu", "kafka"],
        default="tansu",
        help="tansu (embedded, default) or kafka (3-node Apache Kafka KRaft cluster on "
        "loopback, fetched with Maven into a cache; see tests/kafka_cluster)",
    )
