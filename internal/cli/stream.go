package cli

// Moving volume streams (export, import, their diffs) to and from files
// or the standard streams.

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/volume"
)

// streamOut writes a volume stream to path (a file, or - for stdout) with
// a progress bar; a file is complete or absent, never half written.
func streamOut(g *globals, path, what string, write func(io.Writer, volume.Progress) error) error {
	w, done, err := createOutput(path)
	if err != nil {
		return err
	}
	bar := newByteBar(g, what)
	if err := write(w, bar.update); err != nil {
		bar.abort()
		done(false)
		return err
	}
	bar.finish()
	return done(true)
}

// streamInCmd is a command that applies a volume stream read from a file or
// stdin (import, import-diff).
func streamInCmd(g *globals, use, short, what string,
	apply func(context.Context, *client.Pool, io.Reader, string, volume.Progress) (volume.Info, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := openInput(args[0])
			if err != nil {
				return err
			}
			defer r.Close()
			return withVolumePool(cmd.Context(), g, args[1], func(p *client.Pool, name string) error {
				bar := newByteBar(g, what+" "+args[1])
				info, err := apply(cmd.Context(), p, r, name, bar.update)
				if err != nil {
					bar.abort()
					return err
				}
				bar.finish()
				return printVolume(g, info)
			})
		},
	}
}

// createOutput opens FILE (via a temporary name, renamed on success) or stdout.
func createOutput(path string) (io.Writer, func(ok bool) error, error) {
	if path == "-" {
		return os.Stdout, func(bool) error { return nil }, nil
	}
	tmp := path + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, nil, err
	}
	return f, func(ok bool) error {
		if !ok {
			f.Close()
			os.Remove(tmp)
			return nil
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}, nil
}

func openInput(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return os.Open(path)
}
