#!/usr/bin/env bash
# Java for Spark (bertflow.spark and its tests): PySpark 4 needs Java 17 or
# newer. Does nothing when `java` (or $JAVA_HOME/bin/java) is 17+; otherwise
# installs Debian/Ubuntu's openjdk-17-jre-headless with apt-get (as root, or
# through `sudo -n`), and says what to do where it cannot.
set -euo pipefail
java_bin=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java_bin="$JAVA_HOME/bin/java"; fi
major() {
  "$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}
if command -v "$java_bin" >/dev/null 2>&1; then
  v=$(major)
  if [ -n "$v" ] && [ "$v" -ge 17 ]; then exit 0; fi
  echo "ensure-java: found Java ${v:-?}, Spark 4 needs 17 or newer" >&2
fi
fail() {
  cat >&2 <<MSG
ensure-java: no Java 17+ found, and it cannot be installed here ($1).
Install a JDK or JRE 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless;
elsewhere e.g. https://adoptium.net) and put \`java\` on PATH or set JAVA_HOME. Only the
Spark part (bertflow.spark and its tests) needs it.
MSG
  exit 1
}
command -v apt-get >/dev/null 2>&1 || fail "no apt-get"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  fail "not root and no password-less sudo"
fi
echo "ensure-java: installing openjdk-17-jre-headless with apt-get ..." >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2 || fail "apt-get update failed"
pkg=openjdk-17-jre-headless
apt-cache show "$pkg" >/dev/null 2>&1 || pkg=default-jre-headless
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$pkg" >&2 || fail "apt-get install $pkg failed"
java_bin=java
v=$(major)
if [ -z "$v" ] || [ "$v" -lt 17 ]; then fail "$pkg gave Java ${v:-none}"; fi
echo "ensure-java: installed Java $v" >&2
