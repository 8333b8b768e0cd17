package main

import (
	"strings"
	"testing"
)

func TestParseDSN_TellsTheDatabaseFromTheForm(t *testing.T) {
	for _, c := range []struct{ dsn, driver, want string }{
		{"", "postgres", ""},
		{"postgres://u:p@db:5432/app?sslmode=disable", "postgres", "postgres://u:p@db:5432/app?sslmode=disable"},
		{"postgresql://db/app", "postgres", "postgresql://db/app"},
		{"host=db dbname=app user=u", "postgres", "host=db dbname=app user=u"},
		{"mysql://u:p@db:3306/app", "mysql", "u:p@tcp(db:3306)/app"},
		{"mysql://u@db/app?parseTime=true", "mysql", "u@tcp(db:3306)/app?parseTime=true"},
		{"u:p@tcp(db:3306)/app", "mysql", "u:p@tcp(db:3306)/app"},
		{"u@unix(/run/mysqld/mysqld.sock)/app", "mysql", "u@unix(/run/mysqld/mysqld.sock)/app"},
	} {
		got, err := parseDSN(c.dsn)
		if err != nil {
			t.Errorf("parseDSN(%q): %v", c.dsn, err)
			continue
		}
		if got.driver != c.driver || got.dsn != c.want {
			t.Errorf("parseDSN(%q) = %s %q, want %s %q", c.dsn, got.driver, got.dsn, c.driver, c.want)
		}
	}
}

func TestParseDSN_RefusesOtherFormsWithoutRepeatingThem(t *testing.T) {
	for _, dsn := range []string{"sqlserver://sa:s3cret@db/app", "s3cret", "mysql://u:s3cret@db", "mysql://u:s3cret@db/app/x",
		"mysql://u:s3cret@db/app?parseTime=maybe", "postgres://u:s3cret%zz@db/app"} {
		_, err := parseDSN(dsn)
		if err == nil {
			t.Errorf("parseDSN(%q) is accepted", dsn)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("parseDSN(%q)'s error shows the secret: %v", dsn, err)
		}
	}
}
