package kplane.tools;

import java.io.IOException;
import org.apache.zookeeper.server.NIOServerCnxnFactory;
import org.apache.zookeeper.server.ZooKeeperServer;

/**
 * ZooKeeper's NIO connection factory, with the server's database loaded before the first
 * connection is accepted.
 *
 * <p>ZooKeeper 3.8 accepts connections while it loads its database. A connection it must
 * close then (the server is not running yet) is never closed: closing it dereferences the
 * database, which is still null (ZOOKEEPER-5051), so the client waits for an answer until
 * its session has expired. With the database loaded first, such a connection is closed and
 * the client connects again.
 */
public final class LoadedFirstCnxnFactory extends NIOServerCnxnFactory {
    @Override
    public void startup(ZooKeeperServer server, boolean startServer)
            throws IOException, InterruptedException {
        if (startServer) {
            server.startdata();
        }
        super.startup(server, startServer);
    }
}
