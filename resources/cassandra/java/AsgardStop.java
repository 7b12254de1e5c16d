import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Readies a lone Cassandra node for SIGKILL over JMX, in one short JVM (nodetool would take two):
 * stop the CQL server (no request is acknowledged after this returns), then flush every table of
 * every keyspace (durable_writes=false ones included), so nothing acknowledged lives only in a
 * memtable. Cassandra's own drain does the same plus a 2 s quiet period of the inter-node
 * messaging shutdown, which a lone node has no use for.
 *
 * Usage: AsgardStop PORT [PASSWORD_FILE]   (PASSWORD_FILE: one line "user password")
 * Prints the seconds of each step; exit 0 only when every flush returned (or the node had been
 * drained already).
 */
public final class AsgardStop {
    public static void main(String[] args) throws Exception {
        long t0 = System.nanoTime();
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://127.0.0.1:" + args[0] + "/jmxrmi");
        Map<String, Object> env = new HashMap<>();
        if (args.length > 1) {
            String[] userPassword = Files.readString(Path.of(args[1])).trim().split("\\s+", 2);
            env.put(JMXConnector.CREDENTIALS, userPassword);
        }
        try (JMXConnector connector = JMXConnectorFactory.connect(url, env)) {
            MBeanServerConnection mbs = connector.getMBeanServerConnection();
            ObjectName ss = new ObjectName("org.apache.cassandra.db:type=StorageService");
            long t1 = System.nanoTime();
            if ((Boolean) mbs.getAttribute(ss, "Drained")) {  // `nodetool drain` did it all already
                System.out.printf("connect %.3f drained already%n", (t1 - t0) / 1e9);
                return;
            }
            mbs.invoke(ss, "stopNativeTransport", new Object[]{false}, new String[]{"boolean"});
            long t2 = System.nanoTime();
            @SuppressWarnings("unchecked")
            List<String> keyspaces = (List<String>) mbs.getAttribute(ss, "Keyspaces");
            // all at once: the flush writers take the memtables of every keyspace together
            ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, keyspaces.size()));
            List<Future<Object>> flushes = new ArrayList<>();
            for (String keyspace : keyspaces)
                flushes.add(pool.submit(() -> mbs.invoke(ss, "forceKeyspaceFlush", new Object[]{keyspace, new String[0]},
                                                         new String[]{"java.lang.String", "[Ljava.lang.String;"})));
            try {
                for (Future<Object> flush : flushes)
                    flush.get();  // a failed flush throws: exit 1, the caller stops by SIGTERM instead
            } finally {
                pool.shutdownNow();
            }
            long t3 = System.nanoTime();
            System.out.printf("connect %.3f stop_cql %.3f flush %.3f keyspaces %d%n",
                              (t1 - t0) / 1e9, (t2 - t1) / 1e9, (t3 - t2) / 1e9, keyspaces.size());
        }
    }
}
