// A schema name is written into every statement of the stores: one that
// is not a plain identifier is refused at compile time.
static PAYMENTS: stateguard::Stores = stateguard::stores!(schema = "pay\"ments; DROP TABLE x");

fn main() {
    let _ = &PAYMENTS;
}
