use stateguard::StateMachine;

// `available` reads every guard that binds no values as one bit of one
// 64-bit integer: 63 of them at most.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "many", column = "status", key = "id")]
pub enum ManyGuards {
    #[state(initial)]
    #[transition(go0 -> T0, guard = "amount > 0")]
    #[transition(go1 -> T1, guard = "amount > 1")]
    #[transition(go2 -> T2, guard = "amount > 2")]
    #[transition(go3 -> T3, guard = "amount > 3")]
    #[transition(go4 -> T4, guard = "amount > 4")]
    #[transition(go5 -> T5, guard = "amount > 5")]
    #[transition(go6 -> T6, guard = "amount > 6")]
    #[transition(go7 -> T7, guard = "amount > 7")]
    #[transition(go8 -> T8, guard = "amount > 8")]
    #[transition(go9 -> T9, guard = "amount > 9")]
    #[transition(go10 -> T10, guard = "amount > 10")]
    #[transition(go11 -> T11, guard = "amount > 11")]
    #[transition(go12 -> T12, guard = "amount > 12")]
    #[transition(go13 -> T13, guard = "amount > 13")]
    #[transition(go14 -> T14, guard = "amount > 14")]
    #[transition(go15 -> T15, guard = "amount > 15")]
    #[transition(go16 -> T16, guard = "amount > 16")]
    #[transition(go17 -> T17, guard = "amount > 17")]
    #[transition(go18 -> T18, guard = "amount > 18")]
    #[transition(go19 -> T19, guard = "amount > 19")]
    #[transition(go20 -> T20, guard = "amount > 20")]
    #[transition(go21 -> T21, guard = "amount > 21")]
    #[transition(go22 -> T22, guard = "amount > 22")]
    #[transition(go23 -> T23, guard = "amount > 23")]
    #[transition(go24 -> T24, guard = "amount > 24")]
    #[transition(go25 -> T25, guard = "amount > 25")]
    #[transition(go26 -> T26, guard = "amount > 26")]
    #[transition(go27 -> T27, guard = "amount > 27")]
    #[transition(go28 -> T28, guard = "amount > 28")]
    #[transition(go29 -> T29, guard = "amount > 29")]
    #[transition(go30 -> T30, guard = "amount > 30")]
    #[transition(go31 -> T31, guard = "amount > 31")]
    #[transition(go32 -> T32, guard = "amount > 32")]
    #[transition(go33 -> T33, guard = "amount > 33")]
    #[transition(go34 -> T34, guard = "amount > 34")]
    #[transition(go35 -> T35, guard = "amount > 35")]
    #[transition(go36 -> T36, guard = "amount > 36")]
    #[transition(go37 -> T37, guard = "amount > 37")]
    #[transition(go38 -> T38, guard = "amount > 38")]
    #[transition(go39 -> T39, guard = "amount > 39")]
    #[transition(go40 -> T40, guard = "amount > 40")]
    #[transition(go41 -> T41, guard = "amount > 41")]
    #[transition(go42 -> T42, guard = "amount > 42")]
    #[transition(go43 -> T43, guard = "amount > 43")]
    #[transition(go44 -> T44, guard = "amount > 44")]
    #[transition(go45 -> T45, guard = "amount > 45")]
    #[transition(go46 -> T46, guard = "amount > 46")]
    #[transition(go47 -> T47, guard = "amount > 47")]
    #[transition(go48 -> T48, guard = "amount > 48")]
    #[transition(go49 -> T49, guard = "amount > 49")]
    #[transition(go50 -> T50, guard = "amount > 50")]
    #[transition(go51 -> T51, guard = "amount > 51")]
    #[transition(go52 -> T52, guard = "amount > 52")]
    #[transition(go53 -> T53, guard = "amount > 53")]
    #[transition(go54 -> T54, guard = "amount > 54")]
    #[transition(go55 -> T55, guard = "amount > 55")]
    #[transition(go56 -> T56, guard = "amount > 56")]
    #[transition(go57 -> T57, guard = "amount > 57")]
    #[transition(go58 -> T58, guard = "amount > 58")]
    #[transition(go59 -> T59, guard = "amount > 59")]
    #[transition(go60 -> T60, guard = "amount > 60")]
    #[transition(go61 -> T61, guard = "amount > 61")]
    #[transition(go62 -> T62, guard = "amount > 62")]
    #[transition(go63 -> T63, guard = "amount > 63")]
    Start,
    T0,
    T1,
    T2,
    T3,
    T4,
    T5,
    T6,
    T7,
    T8,
    T9,
    T10,
    T11,
    T12,
    T13,
    T14,
    T15,
    T16,
    T17,
    T18,
    T19,
    T20,
    T21,
    T22,
    T23,
    T24,
    T25,
    T26,
    T27,
    T28,
    T29,
    T30,
    T31,
    T32,
    T33,
    T34,
    T35,
    T36,
    T37,
    T38,
    T39,
    T40,
    T41,
    T42,
    T43,
    T44,
    T45,
    T46,
    T47,
    T48,
    T49,
    T50,
    T51,
    T52,
    T53,
    T54,
    T55,
    T56,
    T57,
    T58,
    T59,
    T60,
    T61,
    T62,
    T63,
}

fn main() {}
