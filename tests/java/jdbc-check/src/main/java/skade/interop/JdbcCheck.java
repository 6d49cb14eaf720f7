package skade.interop;

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
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
 *   <li>{@code catalogs}, {@code schemas}, {@code table-types}, {@code tables}, {@code
 *       columns}, {@code primary-keys}: DatabaseMetaData over the namespace given as the third
 *       argument (default {@code jdbc_meta}) and its table {@code people};
 *   <li>{@code query} and {@code prepared-query}: a SELECT on that table, plain and with a
 *       bound parameter;
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
      } catch (RuntimeException e) { // the driver reads SQL_TRANSACTIONS_SUPPORTED
        System.out.println("transactions: " + e.getClass().getSimpleName());
      }
      String namespace = args.length > 2 ? args[2] : "jdbc_meta";
      System.out.println("catalogs: " + column(meta.getCatalogs(), "TABLE_CAT"));
      System.out.println("schemas: " + column(meta.getSchemas(null, namespace + "%"), "TABLE_SCHEM"));
      System.out.println("table-types: " + column(meta.getTableTypes(), "TABLE_TYPE"));
      System.out.println("tables: " + column(meta.getTables(null, namespace, "%", null), "TABLE_NAME"));
      try (ResultSet columns = meta.getColumns(null, namespace, "people", "%")) {
        StringBuilder out = new StringBuilder();
        while (columns.next()) {
          out.append(out.length() == 0 ? "" : ",").append(columns.getString("COLUMN_NAME"))
              .append(':').append(columns.getString("TYPE_NAME"));
        }
        System.out.println("columns: " + out);
      }
      System.out.println("primary-keys: " + column(meta.getPrimaryKeys(null, namespace, "people"), "COLUMN_NAME"));
      try (Statement statement = conn.createStatement();
          ResultSet rows = statement.executeQuery(
              "SELECT id, name FROM " + namespace + ".people WHERE id > 1 AND name IS NOT NULL")) {
        StringBuilder out = new StringBuilder();
        while (rows.next()) {
          out.append(out.length() == 0 ? "" : ",").append(rows.getLong("id")).append('=').append(rows.getString("name"));
        }
        System.out.println("query: " + out);
      } catch (SQLException e) {
        System.out.println("query: " + oneLine(e));
      }
      try (PreparedStatement query = conn.prepareStatement(
          "SELECT id FROM " + namespace + ".people WHERE name = ?")) {
        query.setString(1, "b");
        StringBuilder out = new StringBuilder();
        try (ResultSet rows = query.executeQuery()) {
          while (rows.next()) {
            out.append(out.length() == 0 ? "" : ",").append(rows.getLong(1));
          }
        }
        System.out.println("prepared-query: " + out);
      } catch (SQLException e) {
        System.out.println("prepared-query: " + oneLine(e));
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

  /** The values of {@code name} in {@code rows}, comma-separated, in the order given. */
  private static String column(ResultSet rows, String name) throws SQLException {
    StringBuilder out = new StringBuilder();
    try (rows) {
      while (rows.next()) {
        out.append(out.length() == 0 ? "" : ",").append(rows.getString(name));
      }
    }
    return out.toString();
  }

  private static String oneLine(Throwable e) {
    StringBuilder out = new StringBuilder(String.valueOf(e.getMessage()));
    for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
      out.append(" | caused by ").append(cause.getClass().getSimpleName()).append(": ").append(cause.getMessage());
    }
    return out.toString().replace('\n', ' ');
  }
}
