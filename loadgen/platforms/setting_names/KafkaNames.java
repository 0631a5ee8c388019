// Prints the broker and topic config names of the Kafka jars on the classpath, one a line
// ("broker NAME" or "topic NAME"), into the file named by the first argument.
// Run by loadgen.platforms.setting_names.generate: java -cp KAFKA_JARS KafkaNames.java OUT
import java.io.PrintWriter;

public class KafkaNames {
    public static void main(String[] args) throws Exception {
        try (PrintWriter out = new PrintWriter(args[0], "UTF-8")) {
            scala.collection.Iterator<String> broker = kafka.server.KafkaConfig.configNames().iterator();
            while (broker.hasNext()) {
                out.println("broker " + broker.next());
            }
            for (String name : org.apache.kafka.storage.internals.log.LogConfig.configNames()) {
                out.println("topic " + name);
            }
        }
    }
}
