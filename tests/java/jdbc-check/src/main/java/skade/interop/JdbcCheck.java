package skade.interop;

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

/**
 * What the Arrow Flight SQL JDBC driver (flight-sql-jdbc-driver) can do against skade,
 * one line per step (tests/interop/test_java.py reads them):
 *
 * <pre>
 * java -cp ... skade.interop.JdbcCheck 127.0.0.1 50051
 * </pre>
 *
 * <ul>
 *   <li>{@code connected}: the connection opens;
 *   <li>{@code product=... version=...} and {@code transactions: ...}: DatabaseMetaData, from
 *       skade's GetSqlInfo;
 *   <li>{@code prepare-insert: ...} and {@code execute-insert: ...}: a row insert the JDBC
 *       way, a prepared {@code INSERT} with a bound parameter and {@code executeBatch()}
 *       (the driver's only write path; it has no bulk ingest, arrow-java issue 931), and a
 *       plain statement: each prints {@code ok} or the SQLException's message.
 * </ul>
 */
public final class JdbcCheck {
  private JdbcCheck() {}

  public static void main(String[] args) throws Exception {
    String url = "jdbc:arrow-flight-sql://" + args[0] + ":" + args[1] + "/?useEncryption=false";
    try (Connection conn = DriverManager.getConnection(url, new Properties())) {
      System.out.println("connected");
      DatabaseMetaData meta = conn.getMetaData();
      System.out.println("product=" + meta.getDatabaseProductName() + " version=" + meta.getDatabaseProductVersion());
      try {
        System.out.println("transactions: " + meta.supportsTransactions());
      } catch (RuntimeException e) { // the driver reads SQL_TRANSACTIONS_SUPPORTED, which skade does not send
        System.out.println("transactions: " + e.getClass().getSimpleName());
      }
      try (PreparedStatement insert = conn.prepareStatement("INSERT INTO jdbc.people (id) VALUES (?)")) {
        insert.setLong(1, 1);
        insert.addBatch();
        insert.executeBatch();
        System.out.println("prepare-insert: ok");
      } catch (SQLException e) {
        System.out.println("prepare-insert: " + oneLine(e));
      }
      try (Statement statement = conn.createStatement()) {
        statement.executeUpdate("INSERT INTO jdbc.people (id) VALUES (1)");
        System.out.println("execute-insert: ok");
      } catch (SQLException e) {
        System.out.println("execute-insert: " + oneLine(e));
      }
    }
  }

  private static String oneLine(Throwable e) {
    StringBuilder out = new StringBuilder(String.valueOf(e.getMessage()));
    for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
      out.append(" | caused by ").append(cause.getClass().getSimpleName()).append(": ").append(cause.getMessage());
    }
    return out.toString().replace('\n', ' ');
  }
}
