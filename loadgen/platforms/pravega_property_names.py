"""Property names of the Pravega 0.13.0 standalone, from the `Property.named(...)` definitions
in the static initialisers of the config classes in its jars (io.pravega:pravega-* 0.13.0 on
Maven Central), each under its class's COMPONENT_CODE. Generated, not edited.

- PRAVEGA_COMPONENTS: component -> its property names (without the component prefix). The
  standalone reads `singlenode.*` (its own settings) and the segment store's components from one
  properties file; `controller.*` are read by a controller from Java system properties or its
  own controller.config.properties, not from that file."""

from __future__ import annotations

PRAVEGA_COMPONENTS: dict[str, frozenset[str]] = {
    'attributeindex': frozenset({
        'attributeSegment.rolling.size.bytes', 'indexPage.size.bytes.max',
    }),
    'autoScale': frozenset({
        'cache.cleanUp.interval.seconds', 'cache.expiry.seconds',
        'controller.connect.security.auth.enable', 'controller.connect.security.tls.enable',
        'controller.connect.security.tls.truststore.location',
        'controller.connect.security.tls.validateHostName.enable', 'controller.connect.uri',
        'cooldown.time.seconds', 'mute.time.seconds', 'requestStream.name',
        'security.auth.token.signingKey.basis', 'threadPool.size',
    }),
    'azure': frozenset({
        'connect.config.access.key', 'connection.string', 'container', 'container.create',
        'endpoint', 'prefix',
    }),
    'bookkeeper': frozenset({
        'ack.quorum.size', 'connect.security.auth.pwd', 'connect.security.tls.enable',
        'connect.security.tls.trustStore.location', 'connect.security.trustStore.pwd.location',
        'digest.type.name', 'ensemble.size', 'ledger.path', 'ledger.size.max',
        'networkTopology.script.location', 'read.batch.size', 'read.timeout.milliseconds',
        'write.attempts.count.max', 'write.outstanding.bytes.max', 'write.quorum.racks.count.min',
        'write.quorum.racks.minimumCount.enable', 'write.quorum.size', 'write.timeout.milliseconds',
        'zk.connect.sessionTimeout.milliseconds', 'zk.connect.uri', 'zk.metadata.hierarchy.depth',
        'zk.metadata.path',
    }),
    'containers': frozenset({
        'data.integrity.checks.enabled', 'eventprocessor.iteration.delay.ms',
        'eventprocessor.operation.timeout.ms', 'extended.attribute.cached.count.max',
        'metadataStore.init.timeout.seconds', 'segment.active.count.max',
        'segment.eviction.concurrent.count.max', 'segment.metadata.expiry.seconds',
        'segment.transient.delete.timeout.ms', 'storage.snapshot.timeout.seconds',
    }),
    'controller': frozenset({
        'cluster.name', 'container.count', 'dumpStackOnShutdown.enable', 'health.frequency.seconds',
        'hostMonitor.enable', 'listCompletedTxn.max.records', 'pravegaTables.enable',
        'rebalance.interval.seconds.min', 'request.replyWithStackTraceOnError.enable',
        'request.tracing.enable', 'retention.bucket.count', 'retention.frequency.minutes',
        'retention.thread.count', 'scale.request.readerGroup.name', 'scale.request.stream.name',
        'security.auth.delegationToken.signingKey.basis',
        'security.auth.delegationToken.ttl.seconds', 'security.auth.enable',
        'security.auth.readerGroupStreams.writesWithReadPermissions.enable',
        'security.pwdAuthHandler.accountsDb.location', 'security.tls.enable',
        'security.tls.protocolVersion', 'security.tls.server.certificate.location',
        'security.tls.server.keyStore.location', 'security.tls.server.keyStore.pwd.location',
        'security.tls.server.privateKey.location', 'security.tls.trustStore.location',
        'segmentstore.connect.channel.timeoutSeconds', 'segmentstore.connect.channel.tls',
        'segmentstore.connect.host.nameOrIp', 'segmentstore.connect.port',
        'service.asyncTaskPool.size', 'service.rest.listener.host.ip', 'service.rest.listener.port',
        'service.rpc.listener.port', 'service.rpc.published.host.nameOrIp',
        'service.rpc.published.port', 'transaction.execution.timeBound.days',
        'transaction.lease.count.max', 'transaction.lease.count.min', 'transaction.ttl.hours',
        'watermarking.bucket.count', 'watermarking.frequency.seconds', 'watermarking.thread.count',
        'zk.connect.retries.count.max', 'zk.connect.retries.interval.milliseconds',
        'zk.connect.security.enable', 'zk.connect.security.tls.trustStore.location',
        'zk.connect.security.tls.trustStore.pwd.location',
        'zk.connect.session.timeout.milliseconds', 'zk.connect.uri',
    }),
    'durablelog': frozenset({
        'checkpoint.commit.count.min', 'checkpoint.commit.length.total',
        'checkpoint.commit.threshold.count', 'start.retry.delay.millis',
        'throttler.max.batching.delay.millis', 'throttler.max.delay.millis',
        'throttler.operation.log.size.max', 'throttler.operation.log.size.target',
    }),
    'extendeds3': frozenset({
        'bucket', 'concat.smallObject.threshold.size', 'connect.config.uri', 'noneMatch.enable',
        'prefix',
    }),
    'filesystem': frozenset({
        'replace.enable', 'root',
    }),
    'gcp': frozenset({
        'account.type', 'bucket', 'client.email', 'client.id', 'prefix', 'private.key',
        'private.key.id', 'project.id', 'useMock',
    }),
    'hdfs': frozenset({
        'block.size', 'connect.uri', 'replaceDataNodesOnFailure.enable', 'replication.factor',
        'root',
    }),
    'metrics': frozenset({
        'dynamicCache.eviction.duration.minutes', 'dynamicCache.size',
        'influxDB.connect.credentials.pwd', 'influxDB.connect.credentials.username',
        'influxDB.connect.db.name', 'influxDB.connect.uri', 'influxDB.reporter.enable',
        'influxDB.retention', 'output.frequency.seconds', 'prefix', 'prometheus.enable',
        'statistics.enable', 'statsD.connect.host', 'statsD.connect.port', 'statsD.reporter.enable',
    }),
    'pravegaservice': frozenset({
        'admin.gateway.enable', 'admin.gateway.port', 'cache.generation.duration.seconds',
        'cache.size.max', 'cache.time.seconds.max', 'cache.utilization.percent.max',
        'cache.utilization.percent.target', 'clusterName', 'container.count',
        'container.parallelStarts', 'dataLog.impl.name', 'health.interval.seconds', 'instance.id',
        'readOnly.enable', 'request.replyWithStackTraceOnError.enable', 'rest.listener.enable',
        'rest.listener.host', 'rest.listener.port', 'security.tls.certificate.autoReload.enable',
        'security.tls.enable', 'security.tls.protocolVersion',
        'security.tls.server.certificate.location', 'security.tls.server.keyStore.location',
        'security.tls.server.keyStore.pwd.location', 'security.tls.server.privateKey.location',
        'security.tls.server.privateKey.password.location', 'service.listener.host.nameOrIp',
        'service.listener.port', 'service.published.host.nameOrIp', 'service.published.port',
        'storage.impl.name', 'storage.layout', 'threadPool.core.size',
        'threadPool.lowPriorityTasks.size', 'threadPool.storage.size',
        'zk.connect.retries.count.max', 'zk.connect.retries.interval.milliseconds',
        'zk.connect.security.enable', 'zk.connect.security.tls.trustStore.location',
        'zk.connect.security.tls.trustStore.pwd.location', 'zk.connect.sessionTimeout.milliseconds',
        'zk.connect.uri',
    }),
    'readindex': frozenset({
        'memoryRead.length.min', 'storageRead.alignment', 'storageRead.timeout.default.millis',
    }),
    's3': frozenset({
        'bucket', 'connect.config.access.key', 'connect.config.assumeRole.enable',
        'connect.config.region', 'connect.config.role', 'connect.config.secret.key',
        'connect.config.uri', 'connect.config.uri.override', 'noneMatch.enable', 'prefix',
    }),
    'singlenode': frozenset({
        'admin.gateway.enable', 'admin.gateway.port', 'controller.rest.enable',
        'controller.rest.port', 'controller.rpc.port', 'metrics.enable', 'metrics.influx.enable',
        'metrics.prometheus.enable', 'metrics.reporting.interval', 'security.auth.credentials.pwd',
        'security.auth.credentials.username', 'security.auth.enable',
        'security.auth.pwdAuthHandler.accountsDb.location', 'security.tls.certificate.location',
        'security.tls.enable', 'security.tls.keyStore.location',
        'security.tls.keyStore.pwd.location', 'security.tls.privateKey.location',
        'security.tls.protocolVersion', 'security.tls.trustStore.location', 'segmentStore.port',
        'segmentStore.tls.certificate.autoReload.enable', 'zk.port',
    }),
    'storage': frozenset({
        'appends.buffer.size.bytes.max', 'appends.enable', 'concat.size.bytes.max',
        'concat.size.bytes.min', 'defrag.inline.enable', 'garbage.collection.attempts.max',
        'garbage.collection.concurrency.max', 'garbage.collection.delay.seconds',
        'garbage.collection.queue.size.max', 'garbage.collection.sleep.millis',
        'garbage.collection.txn.batch.size.max', 'journal.snapshot.attempts.read.max',
        'journal.snapshot.attempts.write.max', 'journal.snapshot.update.count.max',
        'journal.snapshot.update.frequency.minutes', 'metadata.buffer.size.max',
        'metadata.cache.size.max', 'metadata.rollover.size.bytes.max', 'readindex.block.size',
        'readindex.chunks.max', 'readindex.chunksPerSegment.max', 'readindex.segments.max',
        'safe.size.bytes.max', 'safe.size.check.enable', 'safe.size.check.frequency.seconds',
        'self.check.enable', 'self.check.integrity.data', 'self.check.integrity.metadata',
        'self.check.late', 'truncate.relocate.enable', 'truncate.relocate.percent.min',
        'truncate.relocate.size.bytes.max', 'truncate.relocate.size.bytes.min',
    }),
    'storageextra': frozenset({
        'noOp.mode.enable', 'noOp.write.latency.milliseconds', 'slow.enable',
        'slow.inject.chunk.storage', 'slow.latency.cycle.ms', 'slow.latency.mean.ms',
        'slow.latency.std.ms', 'slow.type',
    }),
    'tables': frozenset({
        'batch.size.bytes', 'compaction.bytes.max', 'compaction.frequency.millis',
        'preindex.batch.bytes.max', 'preindex.bytes.max', 'recovery.timeout.millis',
        'rollover.size.bytes', 'systemcritical.unindexed.bytes.max', 'unindexed.bytes.max',
        'utilization.min',
    }),
    'writer': frozenset({
        'ack.timeout.milliseconds', 'error.sleep.milliseconds', 'flush.attributes.threshold',
        'flush.size.bytes.max', 'flush.threshold.bytes', 'flush.threshold.milliseconds',
        'flush.timeout.milliseconds', 'itemsToReadAtOnce.max', 'read.timeout.milliseconds.max',
        'read.timeout.milliseconds.min', 'rollover.size.bytes.max', 'shutDown.timeout.milliseconds',
    }),
}
