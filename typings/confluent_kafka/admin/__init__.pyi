# Types of the part of confluent-kafka's admin client the project uses (cutover/, router/,
# testground/ and the deploy/ programs mypy checks): topic metadata, creating topics, reading
# topic configs, describing topics and groups, ACLs and SCRAM users, and what each call's
# futures resolve to. Anything else the project starts to use is added here; a name that is
# not here is an error, not Any.
#
# The signatures follow confluent-kafka's own (confluent_kafka/admin: its annotations and
# docstrings, and the C extension's code) for the versions pyproject.toml allows,
# confluent-kafka>=2.13; nothing here is newer than 2.13. The admin calls take their options
# (request_timeout, ...) as keywords only, as AdminClient passes them on to the C extension.

from concurrent.futures import Future
from enum import Enum
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    KafkaError,
    Node,
    TopicCollection,
    TopicPartition,
)

# Enums: every member (their values are librdkafka's, read at import).

class ResourceType(Enum):
    _value_: int
    UNKNOWN = ...
    ANY = ...
    TOPIC = ...
    GROUP = ...
    BROKER = ...
    TRANSACTIONAL_ID = ...

class ResourcePatternType(Enum):
    _value_: int
    UNKNOWN = ...
    ANY = ...
    MATCH = ...
    LITERAL = ...
    PREFIXED = ...

class AclOperation(Enum):
    _value_: int
    UNKNOWN = ...
    ANY = ...
    ALL = ...
    READ = ...
    WRITE = ...
    CREATE = ...
    DELETE = ...
    ALTER = ...
    DESCRIBE = ...
    CLUSTER_ACTION = ...
    DESCRIBE_CONFIGS = ...
    ALTER_CONFIGS = ...
    IDEMPOTENT_WRITE = ...

class AclPermissionType(Enum):
    _value_: int
    UNKNOWN = ...
    ANY = ...
    DENY = ...
    ALLOW = ...

class ScramMechanism(Enum):
    _value_: int
    UNKNOWN = ...
    SCRAM_SHA_256 = ...
    SCRAM_SHA_512 = ...

# Metadata (list_topics): built by the client, every field set.

class PartitionMetadata:
    leader: int  # -1: none
    error: KafkaError | None

class TopicMetadata:
    partitions: dict[int, PartitionMetadata]
    error: KafkaError | None

class BrokerMetadata: ...

class ClusterMetadata:
    cluster_id: str | None  # None if the broker does not give one
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]
    orig_broker_id: int

class NewTopic:
    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment: list[list[int]] | None = None,
                 config: dict[str, str] | None = None) -> None: ...
    topic: str

class ConfigEntry:
    value: str | None  # None if not set, or sensitive

class ConfigResource:
    Type = ResourceType
    # restype: a ResourceType, its name (any case) or its value
    def __init__(self, restype: ResourceType | str | int, name: str,
                 set_config: dict[str, str] | None = None) -> None: ...
    name: str

class AclBinding:
    # The enums may be given by their names (any case) or values; they are converted.
    def __init__(self, restype: ResourceType | str | int, name: str,
                 resource_pattern_type: ResourcePatternType | str | int, principal: str,
                 host: str, operation: AclOperation | str | int,
                 permission_type: AclPermissionType | str | int) -> None: ...

class AclBindingFilter(AclBinding):
    # None (name, principal, host) matches any value, as ANY does for the enums.
    def __init__(self, restype: ResourceType | str | int, name: str | None,
                 resource_pattern_type: ResourcePatternType | str | int,
                 principal: str | None, host: str | None, operation: AclOperation | str | int,
                 permission_type: AclPermissionType | str | int) -> None: ...

class ScramCredentialInfo:
    def __init__(self, mechanism: ScramMechanism, iterations: int) -> None: ...

class UserScramCredentialAlteration: ...

class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    def __init__(self, user: str, scram_credential_info: ScramCredentialInfo, password: bytes,
                 salt: bytes | None = None) -> None: ...

# What the futures of describe_topics and describe_consumer_groups resolve to.

class TopicDescription:
    authorized_operations: list[AclOperation] | None  # asked for, else None

class MemberAssignment:
    topic_partitions: list[TopicPartition]

class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: MemberAssignment    # as the group's coordinator stored it
    group_instance_id: str | None   # a static member's, else None

class ConsumerGroupDescription:
    coordinator: Node
    state: ConsumerGroupState
    members: list[MemberDescription]
    authorized_operations: list[AclOperation] | None  # asked for, else None

class AdminClient:
    # The configuration, a dict: librdkafka's properties, callbacks (error_cb, ...) and a
    # logger, so its values are Any, as in cimpl.pyi.
    def __init__(self, conf: dict[str, Any], /) -> None: ...
    def poll(self, timeout: float = -1) -> int: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...
    # Futures per topic, resolving to None once created.
    def create_topics(self, new_topics: list[NewTopic], *, operation_timeout: float = ...,
                      request_timeout: float = ...,
                      validate_only: bool = False) -> dict[str, Future[None]]: ...
    # Futures per resource, resolving to its config entries by name.
    def describe_configs(self, resources: list[ConfigResource], *,
                         request_timeout: float = ...
                         ) -> dict[ConfigResource, Future[dict[str, ConfigEntry]]]: ...
    def describe_topics(self, topics: TopicCollection, *,
                        include_authorized_operations: bool = False,
                        request_timeout: float = ...) -> dict[str, Future[TopicDescription]]: ...
    def describe_consumer_groups(self, group_ids: list[str], *,
                                 include_authorized_operations: bool = False,
                                 request_timeout: float = ...
                                 ) -> dict[str, Future[ConsumerGroupDescription]]: ...
    def create_acls(self, acls: list[AclBinding], *,
                    request_timeout: float = ...) -> dict[AclBinding, Future[None]]: ...
    def describe_acls(self, acl_binding_filter: AclBindingFilter, *,
                      request_timeout: float = ...) -> Future[list[AclBinding]]: ...
    # Futures per user, resolving to None once altered.
    def alter_user_scram_credentials(self, alterations: list[UserScramCredentialAlteration], *,
                                     request_timeout: float = ...
                                     ) -> dict[str, Future[None]]: ...
