\set base random(1, 1000000000000000)
\set a0 random(1, 100000)
\set a1 random(1, 100000)
\set a2 random(1, 100000)
\set a3 random(1, 100000)
\set a4 random(1, 100000)
\set a5 random(1, 100000)
\set a6 random(1, 100000)
\set a7 random(1, 100000)
\set a8 random(1, 100000)
\set a9 random(1, 100000)
\set a10 random(1, 100000)
\set a11 random(1, 100000)
\set a12 random(1, 100000)
\set a13 random(1, 100000)
\set a14 random(1, 100000)
\set a15 random(1, 100000)
\set a16 random(1, 100000)
\set a17 random(1, 100000)
\set a18 random(1, 100000)
\set a19 random(1, 100000)
\set a20 random(1, 100000)
\set a21 random(1, 100000)
\set a22 random(1, 100000)
\set a23 random(1, 100000)
\set a24 random(1, 100000)
\set a25 random(1, 100000)
\set a26 random(1, 100000)
\set a27 random(1, 100000)
\set a28 random(1, 100000)
\set a29 random(1, 100000)
\set a30 random(1, 100000)
\set a31 random(1, 100000)
\set a32 random(1, 100000)
\set a33 random(1, 100000)
\set a34 random(1, 100000)
\set a35 random(1, 100000)
\set a36 random(1, 100000)
\set a37 random(1, 100000)
\set a38 random(1, 100000)
\set a39 random(1, 100000)
\set a40 random(1, 100000)
\set a41 random(1, 100000)
\set a42 random(1, 100000)
\set a43 random(1, 100000)
\set a44 random(1, 100000)
\set a45 random(1, 100000)
\set a46 random(1, 100000)
\set a47 random(1, 100000)
\set a48 random(1, 100000)
\set a49 random(1, 100000)
\set a50 random(1, 100000)
\set a51 random(1, 100000)
\set a52 random(1, 100000)
\set a53 random(1, 100000)
\set a54 random(1, 100000)
\set a55 random(1, 100000)
\set a56 random(1, 100000)
\set a57 random(1, 100000)
\set a58 random(1, 100000)
\set a59 random(1, 100000)
\set a60 random(1, 100000)
\set a61 random(1, 100000)
\set a62 random(1, 100000)
\set a63 random(1, 100000)
\startpipeline
BEGIN;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-0', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a0;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-1', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a1;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-2', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a2;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-3', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a3;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-4', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a4;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-5', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a5;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-6', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a6;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-7', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a7;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-8', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a8;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-9', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a9;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-10', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a10;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-11', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a11;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-12', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a12;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-13', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a13;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-14', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a14;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-15', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a15;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-16', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a16;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-17', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a17;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-18', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a18;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-19', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a19;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-20', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a20;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-21', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a21;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-22', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a22;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-23', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a23;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-24', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a24;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-25', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a25;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-26', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a26;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-27', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a27;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-28', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a28;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-29', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a29;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-30', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a30;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-31', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a31;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-32', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a32;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-33', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a33;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-34', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a34;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-35', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a35;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-36', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a36;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-37', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a37;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-38', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a38;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-39', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a39;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-40', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a40;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-41', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a41;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-42', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a42;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-43', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a43;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-44', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a44;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-45', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a45;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-46', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a46;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-47', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a47;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-48', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a48;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-49', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a49;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-50', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a50;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-51', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a51;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-52', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a52;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-53', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a53;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-54', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a54;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-55', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a55;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-56', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a56;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-57', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a57;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-58', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a58;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-59', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a59;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-60', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a60;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-61', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a61;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-62', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a62;
RELEASE SAVEPOINT m;
SAVEPOINT m;
INSERT INTO pgb_inbox (consumer_id, message_id, state) VALUES (1, :base || '-63', 'd') ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true;
UPDATE pgb_accounts SET balance = balance + 1 WHERE id = :a63;
RELEASE SAVEPOINT m;
COMMIT;
\endpipeline
