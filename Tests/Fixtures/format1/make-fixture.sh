#!/bin/bash
# Builds the format-1 fixture vault with the CLI of today's code.
set -euo pipefail
BIN=$1; OUT=$2
rm -rf "$OUT"; mkdir -p "$OUT/state" "$OUT/data" "$OUT/home"
export HOME=$OUT/home XDG_STATE_HOME=$OUT/state XDG_DATA_HOME=$OUT/data
V=$OUT/format1.vault
printf '%s\n' 'fixture passphrase: format 1' > $OUT/pass
P="--vault $V --passphrase-file $OUT/pass"
$BIN init --kdf interactive $P
$BIN access-group add team /usr/bin/dd /usr/bin/cat $P
$BIN access-group add ops /usr/bin/tee $P
printf 'github secret' | $BIN add-generic-password $P -s github.com -a alice -l "GitHub token" -j "a comment" -D "token kind" -c aapl -C 1234
printf 'second account' | $BIN add-generic-password $P -s github.com -a bob --accessible afterFirstUnlock
printf 'team secret' | $BIN add-generic-password $P -s deploy -a ci --access-group team --accessible whenUnlockedThisDeviceOnly
printf 'presence secret' | $BIN add-generic-password $P -s bank -a me --access-control userPresence
printf 'synced' | $BIN add-generic-password $P -s sync.example -a sam --synchronizable --accessible always
printf '\x00\x01binary\xff' | $BIN add-generic-password $P -s binary -a raw --accessible afterFirstUnlockThisDeviceOnly
printf 'inet secret' | $BIN add-internet-password $P -s example.com -a carol -r https -P 8443 -p /login -d EXAMPLE -t dflt -l "Example login"
printf 'ftp secret' | $BIN add-internet-password $P -s ftp.example.org -a dave -r ftp --access-group ops
$BIN add-certificates $P -l "Fixture CA" "$(dirname "$0")"/ca.crt
$BIN import $P "$(dirname "$0")"/identity.pem
# an update and a delete, so versions and the id sequence are not trivial
printf 'github secret v2' | $BIN add-generic-password $P -s github.com -a alice -U
printf 'doomed' | $BIN add-generic-password $P -s doomed -a x
$BIN delete-generic-password $P -s doomed -a x >/dev/null
