"""Connection options, mirroring the Go CLI's global flags (internal/conn) for librdkafka.

The names are the CLI's (``--sasl-mechanism`` is ``sasl_mechanism``) and ``KafkaOptions.from_env``
reads the same ``WMRL_*`` variables, so one environment configures the Go stages and the trainer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import contract as c

SASL_PLAIN = "PLAIN"
SASL_SCRAM_SHA_256 = "SCRAM-SHA-256"
SASL_SCRAM_SHA_512 = "SCRAM-SHA-512"
SASL_MECHANISMS = (SASL_PLAIN, SASL_SCRAM_SHA_256, SASL_SCRAM_SHA_512)


def split_brokers(brokers: str | Sequence[str]) -> list[str]:
    """Seed brokers from a comma-separated string or a list of them (blanks dropped)."""
    items = [brokers] if isinstance(brokers, str) else list(brokers)
    return [s.strip() for item in items for s in item.split(",") if s.strip()]


def client_options(
    bootstrap: str | Sequence[str] | None, kafka: KafkaOptions | None, kafka_options: Mapping[str, object]
) -> KafkaOptions:
    """The options of a client made with ``kafka`` or the keyword options (not both), ``bootstrap``
    (when given) replacing the brokers, in ``kafka`` itself when it was passed."""
    if kafka is not None and kafka_options:
        raise TypeError("pass Kafka options either as kafka=KafkaOptions(...) or as keywords, not both")
    opts = kafka if kafka is not None else KafkaOptions.from_env({}, **kafka_options)
    if bootstrap is not None:
        opts.brokers = split_brokers(bootstrap)
    return opts


def _truthy(v: str) -> bool:
    return v.strip().lower() in ("1", "true", "yes", "on")


@dataclass(kw_only=True)
class KafkaOptions:
    """Brokers, client id, topic prefix, SASL and TLS, as the Go CLI's global options."""

    brokers: list[str] = field(default_factory=lambda: ["127.0.0.1:9092"])
    client_id: str = "wmrl-python"
    topic_prefix: str = c.DEFAULT_PREFIX
    sasl_mechanism: str = ""
    sasl_user: str = ""
    sasl_password: str = ""
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    tls_skip_verify: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> KafkaOptions:
        """Options from WMRL_BROKERS, WMRL_SASL_MECHANISM, ... (as the CLI reads them); overrides win."""
        e = os.environ if env is None else env
        o = cls()
        if e.get("WMRL_BROKERS"):
            o.brokers = split_brokers(e["WMRL_BROKERS"])
        for name in ("client_id", "topic_prefix", "sasl_mechanism", "sasl_user", "sasl_password",
                     "tls_ca", "tls_cert", "tls_key", "tls_server_name"):  # fmt: skip
            v = e.get("WMRL_" + name.upper())
            if v is not None:
                setattr(o, name, v)
        for name in ("tls", "tls_skip_verify"):
            v = e.get("WMRL_" + name.upper())
            if v is not None:
                setattr(o, name, _truthy(v))
        for k, val in overrides.items():
            if not hasattr(o, k):
                raise TypeError(f"unknown Kafka option {k!r}")
            setattr(o, k, val)
        return o

    def librdkafka(self) -> dict[str, object]:
        """The librdkafka configuration for these options; raises ValueError for inconsistent ones."""
        seeds = split_brokers(self.brokers)
        if not seeds:
            raise ValueError("no Kafka brokers configured (set brokers or WMRL_BROKERS)")
        conf: dict[str, object] = {"bootstrap.servers": ",".join(seeds)}
        if self.client_id:
            conf["client.id"] = self.client_id
        use_tls = self.tls or bool(self.tls_ca or self.tls_cert or self.tls_key)
        mech = self.sasl_mechanism.upper()
        if mech:
            if mech not in SASL_MECHANISMS:
                raise ValueError(f"sasl_mechanism {self.sasl_mechanism!r}: want one of {', '.join(SASL_MECHANISMS)}")
            if not self.sasl_user:
                raise ValueError(f"sasl_mechanism {mech} needs sasl_user")
            conf.update({"sasl.mechanism": mech, "sasl.username": self.sasl_user, "sasl.password": self.sasl_password})
        conf["security.protocol"] = {
            (False, False): "PLAINTEXT",
            (False, True): "SSL",
            (True, False): "SASL_PLAINTEXT",
            (True, True): "SASL_SSL",
        }[(bool(mech), use_tls)]
        if use_tls:
            if bool(self.tls_cert) != bool(self.tls_key):
                raise ValueError("tls_cert and tls_key must be given together")
            if self.tls_ca:
                conf["ssl.ca.location"] = self.tls_ca
            if self.tls_cert:
                conf["ssl.certificate.location"] = self.tls_cert
                conf["ssl.key.location"] = self.tls_key
            if self.tls_server_name:
                # librdkafka has no option to verify another name than the broker's host.
                raise ValueError(
                    "tls_server_name is not supported by librdkafka (confluent-kafka): connect with "
                    "the host name in the broker's certificate instead"
                )
            if self.tls_skip_verify:
                conf["enable.ssl.certificate.verification"] = False
                conf["ssl.endpoint.identification.algorithm"] = "none"
        return conf
