package cutover.streams;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.StreamPartitioner;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The router's job as a Kafka Streams user would write it, with exactly_once_v2: reads the
 * tagged raw topic, drops heartbeats and the records of the version that is not primary for
 * their event time (one fixed boundary: the "before" version below it, the "from" version at
 * and above it), drops a record whose identity (a digest of key, value and event time, as the
 * router's default "record" identity) was already forwarded within the retention, and forwards
 * the rest to the output topic with their key, value, headers and partition number. A record
 * without readable bg.* headers, or older than the retention, goes to the dead-letter topic
 * with the reason in bg.error.
 *
 * <pre>
 * java -cp streams-router.jar:lib/* cutover.streams.StreamsRouter --bootstrap HOST:PORT
 *   --input RAW --output OUT --boundary EPOCH_MS [--before blue] [--from green]
 *   [--dead-letter OUT.dlq] [--application-id ID] [--threads 1] [--retention-ms 3600000]
 *   [--state-dir DIR] [--properties FILE] [--set name=value ...]
 * </pre>
 *
 * It prints "state RUNNING" and the like on stdout as Kafka Streams changes state.
 */
public final class StreamsRouter {

    static final String STORE = "seen-identities";

    private StreamsRouter() {
    }

    /** The value on its way to a sink, with the raw partition it came from. */
    record Routed(byte[] value, int partition) {
    }

    /** The settings, from the command line. */
    record Settings(String bootstrap, List<String> inputs, String output, String deadLetter,
                    long boundary, String before, String from, String applicationId,
                    int threads, long retentionMs, String stateDir, Properties extra) {

        static Settings parse(String[] args) throws IOException {
            Map<String, String> one = new LinkedHashMap<>();
            List<String> inputs = new ArrayList<>();
            Properties extra = new Properties();
            for (int i = 0; i < args.length; i++) {
                String name = args[i];
                if (!name.startsWith("--") || i + 1 >= args.length) {
                    throw new IllegalArgumentException(
                        "expected --name value pairs, got " + name + ": see the class comment");
                }
                String value = args[++i];
                switch (name) {
                    case "--input" -> inputs.add(value);
                    case "--set" -> {
                        int eq = value.indexOf('=');
                        if (eq < 1) {
                            throw new IllegalArgumentException(
                                "--set takes name=value (a Kafka Streams property), got " + value);
                        }
                        extra.setProperty(value.substring(0, eq), value.substring(eq + 1));
                    }
                    case "--properties" -> {
                        try (InputStream in = Files.newInputStream(Path.of(value))) {
                            extra.load(in);
                        }
                    }
                    default -> one.put(name.substring(2), value);
                }
            }
            for (String needed : List.of("bootstrap", "output", "boundary")) {
                if (!one.containsKey(needed)) {
                    throw new IllegalArgumentException("--" + needed + " is required");
                }
            }
            if (inputs.isEmpty()) {
                throw new IllegalArgumentException("--input RAW_TOPIC is required (once per topic)");
            }
            Settings s = new Settings(one.remove("bootstrap"), inputs, one.remove("output"),
                one.remove("dead-letter"), Long.parseLong(one.remove("boundary")),
                one.getOrDefault("before", "blue"), one.getOrDefault("from", "green"),
                one.getOrDefault("application-id", "cutover-streams-router"),
                Integer.parseInt(one.getOrDefault("threads", "1")),
                Long.parseLong(one.getOrDefault("retention-ms", "3600000")),
                one.get("state-dir"), extra);
            one.keySet().removeAll(List.of("before", "from", "application-id", "threads",
                "retention-ms", "state-dir"));
            if (!one.isEmpty()) {
                throw new IllegalArgumentException("unknown option --" + one.keySet().iterator().next());
            }
            return s;
        }

        Properties streamsProperties() {
            Properties p = new Properties();
            p.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
            p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
            if (stateDir != null) {
                p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
            }
            p.putAll(extra);
            return p;
        }
    }

    /** Decides each raw record: dropped, dead-lettered or forwarded. */
    static final class Route implements Processor<byte[], byte[], byte[], Routed> {
        private final Settings settings;
        private final MessageDigest digest;
        private ProcessorContext<byte[], Routed> context;
        private WindowStore<Bytes, Long> seen;
        private long horizon = Long.MIN_VALUE;   // the largest event time seen by this task

        Route(Settings settings) {
            this.settings = settings;
            try {
                this.digest = MessageDigest.getInstance("SHA-256");
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public void init(ProcessorContext<byte[], Routed> context) {
            this.context = context;
            this.seen = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<byte[], byte[]> r) {
            Headers h = r.headers();
            if ("heartbeat".equals(text(h, "bg.kind"))) {
                return;
            }
            String version = text(h, "bg.version");
            String et = text(h, "bg.event_time");
            long eventTime;
            try {
                eventTime = Long.parseLong(et == null ? "" : et);
            } catch (NumberFormatException e) {
                deadLetter(r, "bg.event_time missing or not an integer");
                return;
            }
            if (version == null) {
                deadLetter(r, "bg.version missing");
                return;
            }
            String primary = eventTime < settings.boundary() ? settings.before() : settings.from();
            if (!version.equals(primary)) {
                return;
            }
            if (horizon != Long.MIN_VALUE && eventTime < horizon - settings.retentionMs()) {
                deadLetter(r, "event time older than the dedup retention: cannot be checked");
                return;
            }
            horizon = Math.max(horizon, eventTime);
            Bytes id = Bytes.wrap(identity(r.key(), r.value(), eventTime));
            if (seen.fetch(id, eventTime) != null) {
                return;
            }
            seen.put(id, eventTime, eventTime);
            context.forward(new Record<>(r.key(), new Routed(r.value(), partition()),
                r.timestamp(), h), "output");
        }

        private int partition() {
            return context.recordMetadata().orElseThrow().partition();
        }

        private void deadLetter(Record<byte[], byte[]> r, String reason) {
            if (settings.deadLetter() == null) {
                throw new IllegalStateException(reason + " (no --dead-letter topic to send it to)");
            }
            Headers h = new RecordHeaders(r.headers().toArray());
            h.add("bg.error", reason.getBytes(StandardCharsets.UTF_8));
            context.forward(new Record<>(r.key(), new Routed(r.value(), partition()),
                r.timestamp(), h), "dead-letter");
        }

        /** Length-prefixed key and value (absent differs from empty) and the event time. */
        private byte[] identity(byte[] key, byte[] value, long eventTime) {
            digest.reset();
            part(key);
            part(value);
            digest.update(ByteBuffer.allocate(8).putLong(eventTime).array());
            return Arrays.copyOf(digest.digest(), 16);
        }

        private void part(byte[] b) {
            if (b == null) {
                digest.update(new byte[] {-1, -1, -1, -1});
            } else {
                digest.update(ByteBuffer.allocate(4).putInt(b.length).array());
                digest.update(b);
            }
        }

        private static String text(Headers h, String name) {
            Header last = h.lastHeader(name);
            return last == null || last.value() == null
                ? null : new String(last.value(), StandardCharsets.UTF_8);
        }
    }

    static Topology topology(Settings s) {
        Serializer<Routed> value = (topic, routed) -> routed.value();
        StreamPartitioner<byte[], Routed> samePartition = new StreamPartitioner<>() {
            @Override
            public Optional<Set<Integer>> partitions(String topic, byte[] key, Routed routed,
                                                     int numPartitions) {
                return Optional.of(Set.of(routed.partition()));
            }
        };
        Topology t = new Topology();
        t.addSource("raw", new ByteArrayDeserializer(), new ByteArrayDeserializer(),
            s.inputs().toArray(new String[0]));
        t.addProcessor("route", () -> new Route(s), "raw");
        t.addStateStore(Stores.windowStoreBuilder(
            Stores.persistentWindowStore(STORE, Duration.ofMillis(s.retentionMs()),
                Duration.ofMillis(1), false),
            Serdes.Bytes(), Serdes.Long()), "route");
        t.addSink("output", s.output(), new ByteArraySerializer(), value, samePartition, "route");
        if (s.deadLetter() != null) {
            t.addSink("dead-letter", s.deadLetter(), new ByteArraySerializer(), value,
                samePartition, "route");
        }
        return t;
    }

    public static void main(String[] args) throws Exception {
        Settings s;
        try {
            s = Settings.parse(args);
        } catch (IllegalArgumentException | IOException e) {
            System.err.println("streams-router: " + e.getMessage());
            System.exit(2);
            return;
        }
        KafkaStreams streams = new KafkaStreams(topology(s), s.streamsProperties());
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            done.countDown();
        }));
        streams.start();
        done.await();
        streams.close(Duration.ofSeconds(30));
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }
}
