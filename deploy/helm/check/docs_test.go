package main

import (
	"os"
	"sort"
	"strings"
	"testing"
)

// TestSecurityDocACLTable compares the ACL table of docs/security.md with the KafkaUsers the
// chart renders for its default values, so the documented least privilege is the deployed one.
func TestSecurityDocACLTable(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- acl-table")
	table, _, ok2 := strings.Cut(rest, "<!-- /acl-table -->")
	if !ok || !ok2 {
		t.Fatal("docs/security.md has no <!-- acl-table --> … <!-- /acl-table --> block")
	}
	documented := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 7 || strings.Contains(cells[0], "---") || strings.TrimSpace(cells[0]) == "stage" {
			continue
		}
		for i := range cells {
			cells[i] = normalizeCell(cells[i])
		}
		documented[strings.Trim(cells[1], "`")] = cells[2:]
	}
	rendered := map[string][]string{}
	for _, m := range render(t, nil) {
		if m.Obj["kind"] != "KafkaUser" || name(m) == "wmrl-topics-check" {
			continue
		}
		var reads, writes, groups, txns, cluster []string
		acls, _ := dig(m.Obj, "spec", "authorization", "acls").([]any)
		for _, a := range acls {
			typ, _ := dig(a, "resource", "type").(string)
			n, _ := dig(a, "resource", "name").(string)
			if dig(a, "resource", "patternType") == "prefix" {
				n = "prefix " + n
			}
			ops, _ := dig(a, "operations").([]any)
			for _, op := range ops {
				switch {
				case typ == "topic" && op == "Read":
					reads = append(reads, n)
				case typ == "topic" && op == "Write":
					writes = append(writes, n)
				case typ == "group" && op == "Read":
					groups = append(groups, n)
				case typ == "transactionalId" && op == "Write":
					txns = append(txns, n)
				case typ == "cluster":
					cluster = append(cluster, op.(string))
				default:
					t.Errorf("%s: ACL %s %s %s has no column in the table", name(m), op, typ, n)
				}
			}
		}
		rendered[name(m)] = []string{list(reads), list(writes), list(groups), list(txns), list(cluster)}
	}
	if len(documented) == 0 {
		t.Fatal("no rows parsed from the ACL table")
	}
	for user, cols := range rendered {
		doc, ok := documented[user]
		if !ok {
			t.Errorf("KafkaUser %s is rendered but not in the table", user)
			continue
		}
		for i, col := range []string{"Read on topics", "Write on topics", "Read on group", "Write on transactional id", "cluster"} {
			if doc[i] != cols[i] {
				t.Errorf("%s %s: table says %q, chart renders %q", user, col, doc[i], cols[i])
			}
		}
	}
	for user := range documented {
		if _, ok := rendered[user]; !ok {
			t.Errorf("table row %s has no rendered KafkaUser", user)
		}
	}
}

// normalizeCell turns "`a`, `b`" or "—" into a sorted comma list without backticks.
func normalizeCell(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "`", ""))
	if s == "—" || s == "-" {
		return ""
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return list(parts)
}

func list(xs []string) string {
	xs = append([]string(nil), xs...)
	sort.Strings(xs)
	return strings.Join(xs, ", ")
}
