// Prints the Property.named(...) definitions of the Pravega jars on the classpath: every static
// field of type io.pravega.common.util.Property in a class of a pravega-*.jar, as
// "COMPONENT_CODE<TAB>NAME" (COMPONENT_CODE the class's own static field of that name), one a
// line, into the file named by the first argument. The classes are initialised to read the
// fields; some log while they are (to stdout), hence the file.
// Run by loadgen.platforms.setting_names.generate: java -cp PRAVEGA_JARS PravegaNames.java OUT
import java.io.File;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarFile;

public class PravegaNames {
    public static void main(String[] args) throws Exception {
        ClassLoader loader = PravegaNames.class.getClassLoader();
        Class<?> property = Class.forName("io.pravega.common.util.Property", false, loader);
        try (PrintWriter out = new PrintWriter(args[0], "UTF-8")) {
            for (String path : System.getProperty("java.class.path").split(File.pathSeparator)) {
                if (!new File(path).getName().startsWith("pravega-")) {
                    continue;
                }
                for (String name : classNames(path)) {
                    Class<?> type;
                    try {
                        type = Class.forName(name, false, loader);
                    } catch (Throwable unloadable) {  // a class whose optional dependency is absent
                        continue;
                    }
                    List<Field> fields = new ArrayList<>();
                    try {
                        for (Field f : type.getDeclaredFields()) {
                            if (Modifier.isStatic(f.getModifiers()) && f.getType() == property) {
                                fields.add(f);
                            }
                        }
                    } catch (Throwable unresolvable) {
                        continue;
                    }
                    if (fields.isEmpty()) {
                        continue;
                    }
                    Field code = type.getDeclaredField("COMPONENT_CODE");
                    code.setAccessible(true);
                    String component = (String) code.get(null);
                    for (Field f : fields) {
                        f.setAccessible(true);
                        Object value = f.get(null);
                        out.println(component + "\t" + property.getMethod("getName").invoke(value));
                    }
                }
            }
        }
    }

    private static List<String> classNames(String jarPath) throws Exception {
        List<String> names = new ArrayList<>();
        try (JarFile jar = new JarFile(jarPath)) {
            for (Enumeration<java.util.jar.JarEntry> e = jar.entries(); e.hasMoreElements();) {
                String entry = e.nextElement().getName();
                if (entry.endsWith(".class") && !entry.endsWith("module-info.class")) {
                    names.add(entry.substring(0, entry.length() - 6).replace('/', '.'));
                }
            }
        }
        return names;
    }
}
