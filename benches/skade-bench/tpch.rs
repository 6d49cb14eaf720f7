//! TPC-H's 8 tables as Arrow batches, generated in-process from `tpchgen` rows
//! (`tpchgen-arrow` needs another arrow major than ours).
//!
//! Types: keys int64, small counts int32, money decimal(15,2), dates date32, text utf8;
//! every column non-nullable. `l_quantity` is int64, as `tpchgen` generates it.

use std::fmt::{Display, Write as _};

use arrow_array::builder::{
    ArrayBuilder, Date32Builder, Decimal128Builder, Int32Builder, Int64Builder, StringBuilder,
    make_builder,
};
use tpchgen::dates::TPCHDate;
use tpchgen::decimal::TPCHDecimal;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};

use crate::common::*;

/// Rows per generated batch (the last batch of a table may be shorter).
pub(crate) const BATCH_ROWS: usize = 65_536;

/// One generated TPC-H table.
pub(crate) struct TpchTable {
    /// The TPC-H table name (`region`, …, `lineitem`).
    pub(crate) name: &'static str,
    /// Its rows, in batches of at most the requested rows.
    pub(crate) batches: Vec<RecordBatch>,
}

impl TpchTable {
    /// Rows in all batches.
    pub(crate) fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// All 8 TPC-H tables at scale factor `sf` (1 ≈ 8.7 M rows in all, 6 M of them
/// `lineitem`), as batches of `rows` rows, smallest table first: region, nation, supplier,
/// part, partsupp, customer, orders, lineitem.
pub(crate) fn tables(sf: f64, rows: usize) -> Vec<TpchTable> {
    let table = |name, batches| TpchTable { name, batches };
    vec![
        table("region", region(sf, rows)),
        table("nation", nation(sf, rows)),
        table("supplier", supplier(sf, rows)),
        table("part", part(sf, rows)),
        table("partsupp", partsupp(sf, rows)),
        table("customer", customer(sf, rows)),
        table("orders", orders(sf, rows)),
        table("lineitem", lineitem(sf, rows)),
    ]
}

/// The Arrow type of a generated column.
#[derive(Clone, Copy)]
enum Col {
    /// int64: keys and `l_quantity`.
    Key,
    /// int32: sizes, quantities, line numbers, priorities.
    Int,
    /// decimal(15,2): money and rates, from `TPCHDecimal` hundredths.
    Money,
    /// date32: days since the Unix epoch.
    Date,
    /// utf8.
    Text,
}

/// One row being appended: each call fills the next column, in schema order.
struct Row<'a> {
    builders: &'a mut [Box<dyn ArrayBuilder>],
    next: usize,
}

impl Row<'_> {
    fn builder<B: ArrayBuilder>(&mut self) -> &mut B {
        let i = self.next;
        self.next += 1;
        self.builders[i]
            .as_any_mut()
            .downcast_mut::<B>()
            .expect("the append matches the column's declared type")
    }

    fn key(&mut self, v: i64) -> &mut Self {
        self.builder::<Int64Builder>().append_value(v);
        self
    }

    fn int(&mut self, v: i32) -> &mut Self {
        self.builder::<Int32Builder>().append_value(v);
        self
    }

    fn money(&mut self, v: TPCHDecimal) -> &mut Self {
        self.builder::<Decimal128Builder>()
            .append_value(i128::from(v.into_inner()));
        self
    }

    fn date(&mut self, v: TPCHDate) -> &mut Self {
        self.builder::<Date32Builder>()
            .append_value(v.to_unix_epoch());
        self
    }

    fn text(&mut self, v: impl Display) -> &mut Self {
        let b = self.builder::<StringBuilder>();
        write!(b, "{v}").expect("writing to a string builder cannot fail");
        b.append_value("");
        self
    }
}

/// Batches of `rows` rows of `fields`, each row filled from one generated item by `fill`.
fn generate<T>(
    fields: &[(&str, Col)],
    items: impl Iterator<Item = T>,
    rows: usize,
    mut fill: impl FnMut(&mut Row<'_>, T),
) -> Vec<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(
        fields
            .iter()
            .map(|&(name, col)| {
                let ty = match col {
                    Col::Key => DataType::Int64,
                    Col::Int => DataType::Int32,
                    Col::Money => DataType::Decimal128(15, 2),
                    Col::Date => DataType::Date32,
                    Col::Text => DataType::Utf8,
                };
                Field::new(name, ty, false)
            })
            .collect::<Vec<_>>(),
    ));
    let mut items = items.peekable();
    let mut out = Vec::new();
    while items.peek().is_some() {
        let mut builders: Vec<Box<dyn ArrayBuilder>> = schema
            .fields()
            .iter()
            .map(|f| make_builder(f.data_type(), rows))
            .collect();
        for item in items.by_ref().take(rows) {
            fill(
                &mut Row {
                    builders: &mut builders,
                    next: 0,
                },
                item,
            );
        }
        let columns: Vec<ArrayRef> = builders.iter_mut().map(|b| b.finish()).collect();
        out.push(RecordBatch::try_new(schema.clone(), columns).expect("columns match the schema"));
    }
    out
}

/// TPC-H `region` (5 rows at any scale factor).
fn region(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [("r_regionkey", Key), ("r_name", Text), ("r_comment", Text)];
    generate(
        &fields,
        RegionGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.r_regionkey).text(x.r_name).text(x.r_comment);
        },
    )
}

/// TPC-H `nation` (25 rows at any scale factor).
fn nation(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("n_nationkey", Key),
        ("n_name", Text),
        ("n_regionkey", Key),
        ("n_comment", Text),
    ];
    generate(
        &fields,
        NationGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.n_nationkey)
                .text(x.n_name)
                .key(x.n_regionkey)
                .text(x.n_comment);
        },
    )
}

/// TPC-H `supplier` (10,000 × `sf` rows).
fn supplier(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("s_suppkey", Key),
        ("s_name", Text),
        ("s_address", Text),
        ("s_nationkey", Key),
        ("s_phone", Text),
        ("s_acctbal", Money),
        ("s_comment", Text),
    ];
    generate(
        &fields,
        SupplierGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.s_suppkey)
                .text(x.s_name)
                .text(x.s_address)
                .key(x.s_nationkey)
                .text(x.s_phone)
                .money(x.s_acctbal)
                .text(x.s_comment);
        },
    )
}

/// TPC-H `part` (200,000 × `sf` rows).
fn part(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("p_partkey", Key),
        ("p_name", Text),
        ("p_mfgr", Text),
        ("p_brand", Text),
        ("p_type", Text),
        ("p_size", Int),
        ("p_container", Text),
        ("p_retailprice", Money),
        ("p_comment", Text),
    ];
    generate(
        &fields,
        PartGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.p_partkey)
                .text(x.p_name)
                .text(x.p_mfgr)
                .text(x.p_brand)
                .text(x.p_type)
                .int(x.p_size)
                .text(x.p_container)
                .money(x.p_retailprice)
                .text(x.p_comment);
        },
    )
}

/// TPC-H `partsupp` (800,000 × `sf` rows).
fn partsupp(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("ps_partkey", Key),
        ("ps_suppkey", Key),
        ("ps_availqty", Int),
        ("ps_supplycost", Money),
        ("ps_comment", Text),
    ];
    generate(
        &fields,
        PartSuppGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.ps_partkey)
                .key(x.ps_suppkey)
                .int(x.ps_availqty)
                .money(x.ps_supplycost)
                .text(x.ps_comment);
        },
    )
}

/// TPC-H `customer` (150,000 × `sf` rows).
fn customer(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("c_custkey", Key),
        ("c_name", Text),
        ("c_address", Text),
        ("c_nationkey", Key),
        ("c_phone", Text),
        ("c_acctbal", Money),
        ("c_mktsegment", Text),
        ("c_comment", Text),
    ];
    generate(
        &fields,
        CustomerGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.c_custkey)
                .text(x.c_name)
                .text(x.c_address)
                .key(x.c_nationkey)
                .text(x.c_phone)
                .money(x.c_acctbal)
                .text(x.c_mktsegment)
                .text(x.c_comment);
        },
    )
}

/// TPC-H `orders` (1,500,000 × `sf` rows).
fn orders(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("o_orderkey", Key),
        ("o_custkey", Key),
        ("o_orderstatus", Text),
        ("o_totalprice", Money),
        ("o_orderdate", Date),
        ("o_orderpriority", Text),
        ("o_clerk", Text),
        ("o_shippriority", Int),
        ("o_comment", Text),
    ];
    generate(
        &fields,
        OrderGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.o_orderkey)
                .key(x.o_custkey)
                .text(x.o_orderstatus)
                .money(x.o_totalprice)
                .date(x.o_orderdate)
                .text(x.o_orderpriority)
                .text(x.o_clerk)
                .int(x.o_shippriority)
                .text(x.o_comment);
        },
    )
}

/// TPC-H `lineitem` (about 6,000,000 × `sf` rows) at scale factor `sf`, as Arrow batches
/// of `rows` rows (decimals as decimal(15,2), dates as date32).
pub(crate) fn lineitem(sf: f64, rows: usize) -> Vec<RecordBatch> {
    use Col::*;
    let fields = [
        ("l_orderkey", Key),
        ("l_partkey", Key),
        ("l_suppkey", Key),
        ("l_linenumber", Int),
        ("l_quantity", Key),
        ("l_extendedprice", Money),
        ("l_discount", Money),
        ("l_tax", Money),
        ("l_returnflag", Text),
        ("l_linestatus", Text),
        ("l_shipdate", Date),
        ("l_commitdate", Date),
        ("l_receiptdate", Date),
        ("l_shipinstruct", Text),
        ("l_shipmode", Text),
        ("l_comment", Text),
    ];
    generate(
        &fields,
        LineItemGenerator::new(sf, 1, 1).iter(),
        rows,
        |r, x| {
            r.key(x.l_orderkey)
                .key(x.l_partkey)
                .key(x.l_suppkey)
                .int(x.l_linenumber)
                .key(x.l_quantity)
                .money(x.l_extendedprice)
                .money(x.l_discount)
                .money(x.l_tax)
                .text(x.l_returnflag)
                .text(x.l_linestatus)
                .date(x.l_shipdate)
                .date(x.l_commitdate)
                .date(x.l_receiptdate)
                .text(x.l_shipinstruct)
                .text(x.l_shipmode)
                .text(x.l_comment);
        },
    )
}
