package driver

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"reflect"
	"slices"
)

// The statements and results of a shared transaction's views (stdsql_shared_state.go): each takes the wire for its
// round trip, and counts its errors as its view's.

var (
	_ sqldriver.ConnPrepareContext = (*viewConn)(nil)
	_ sqldriver.ExecerContext      = (*viewConn)(nil)
	_ sqldriver.QueryerContext     = (*viewConn)(nil)
	_ sqldriver.NamedValueChecker  = (*viewConn)(nil)
)

func (c *viewConn) Prepare(query string) (sqldriver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *viewConn) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	if err := c.refused(); err != nil {
		return nil, err
	}
	var st sqldriver.Stmt
	var err error
	if p, ok := c.s.dc.(sqldriver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.s.dc.Prepare(query)
	}
	if err != nil {
		return nil, c.fail(err)
	}
	return &viewStmt{Stmt: st, c: c}, nil
}

func (c *viewConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	e, ok := c.s.dc.(sqldriver.ExecerContext)
	if !ok {
		return nil, sqldriver.ErrSkip
	}
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	if err := c.refused(); err != nil {
		return nil, err
	}
	res, err := e.ExecContext(ctx, query, args)
	return res, c.fail(err)
}

func (c *viewConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	q, ok := c.s.dc.(sqldriver.QueryerContext)
	if !ok {
		return nil, sqldriver.ErrSkip
	}
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	if err := c.refused(); err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		return nil, c.fail(err)
	}
	return c.opened(rows), nil
}

func (c *viewConn) CheckNamedValue(nv *sqldriver.NamedValue) error {
	if n, ok := c.s.dc.(sqldriver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return sqldriver.ErrSkip
}

// Close leaves dc open: the shared transaction gives it back to database/sql's pool.
func (c *viewConn) Close() error { return nil }

// viewStmt is a statement prepared on dc, whose errors count as its view's.
type viewStmt struct {
	sqldriver.Stmt
	c *viewConn
}

func (s *viewStmt) Close() error {
	s.c.s.wire.Lock()
	defer s.c.s.wire.Unlock()
	return s.Stmt.Close()
}

func (s *viewStmt) Exec(args []sqldriver.Value) (sqldriver.Result, error) {
	s.c.s.wire.Lock()
	defer s.c.s.wire.Unlock()
	if err := s.c.refused(); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 a driver's statement without ExecContext has only Exec
	res, err := s.Stmt.Exec(args)
	return res, s.c.fail(err)
}

func (s *viewStmt) Query(args []sqldriver.Value) (sqldriver.Rows, error) {
	s.c.s.wire.Lock()
	defer s.c.s.wire.Unlock()
	if err := s.c.refused(); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 a driver's statement without QueryContext has only Query
	rows, err := s.Stmt.Query(args)
	if err != nil {
		return nil, s.c.fail(err)
	}
	return s.c.opened(rows), nil
}

func (s *viewStmt) ExecContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	e, ok := s.Stmt.(sqldriver.StmtExecContext)
	if !ok {
		values, err := namedValues(args)
		if err != nil {
			return nil, err
		}
		return s.Exec(values)
	}
	s.c.s.wire.Lock()
	defer s.c.s.wire.Unlock()
	if err := s.c.refused(); err != nil {
		return nil, err
	}
	res, err := e.ExecContext(ctx, args)
	return res, s.c.fail(err)
}

func (s *viewStmt) QueryContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	q, ok := s.Stmt.(sqldriver.StmtQueryContext)
	if !ok {
		values, err := namedValues(args)
		if err != nil {
			return nil, err
		}
		return s.Query(values)
	}
	s.c.s.wire.Lock()
	defer s.c.s.wire.Unlock()
	if err := s.c.refused(); err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, args)
	if err != nil {
		return nil, s.c.fail(err)
	}
	return s.c.opened(rows), nil
}

func (s *viewStmt) CheckNamedValue(nv *sqldriver.NamedValue) error {
	if n, ok := s.Stmt.(sqldriver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

func namedValues(args []sqldriver.NamedValue) ([]sqldriver.Value, error) {
	values := make([]sqldriver.Value, len(args))
	for n, a := range args {
		if a.Name != "" {
			return nil, errors.New("driver: the database's driver does not take named arguments")
		}
		values[n] = a.Value
	}
	return values, nil
}

func (r *viewRows) Close() error {
	r.c.s.wire.Lock()
	defer r.c.s.wire.Unlock()
	if r.closed {
		return nil
	}
	if r.c.v != nil {
		r.c.v.mu.Lock()
		r.c.v.rows = slices.DeleteFunc(r.c.v.rows, func(o *viewRows) bool { return o == r })
		r.c.v.mu.Unlock()
	}
	return r.closeDriver()
}

func (r *viewRows) Next(dest []sqldriver.Value) error {
	r.c.s.wire.Lock()
	defer r.c.s.wire.Unlock()
	if r.closed {
		if err := r.c.refused(); err != nil {
			return err
		}
		return io.EOF
	}
	err := r.Rows.Next(dest)
	if err != io.EOF {
		r.c.fail(err)
	}
	return err
}

func (r *viewRows) HasNextResultSet() bool {
	n, ok := r.Rows.(sqldriver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

func (r *viewRows) NextResultSet() error {
	n, ok := r.Rows.(sqldriver.RowsNextResultSet)
	if !ok {
		return io.EOF
	}
	r.c.s.wire.Lock()
	defer r.c.s.wire.Unlock()
	if r.closed {
		return io.EOF
	}
	return r.c.fail(n.NextResultSet())
}

func (r *viewRows) ColumnTypeScanType(index int) reflect.Type {
	if t, ok := r.Rows.(sqldriver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(index)
	}
	return reflect.TypeFor[any]()
}

func (r *viewRows) ColumnTypeDatabaseTypeName(index int) string {
	if t, ok := r.Rows.(sqldriver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(index)
	}
	return ""
}

func (r *viewRows) ColumnTypeLength(index int) (int64, bool) {
	if t, ok := r.Rows.(sqldriver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(index)
	}
	return 0, false
}

func (r *viewRows) ColumnTypeNullable(index int) (nullable, ok bool) {
	if t, ok := r.Rows.(sqldriver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(index)
	}
	return false, false
}

func (r *viewRows) ColumnTypePrecisionScale(index int) (precision, scale int64, ok bool) {
	if t, ok := r.Rows.(sqldriver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(index)
	}
	return 0, 0, false
}
